"""Interop: vtlab encoders as sentence-transformers SparseEncoder directories, document vectors for search engines.

`sentence_transformers.export_sentence_transformers` writes a directory `SparseEncoder(path)` loads as is;
`vectors.write_vectors` streams documents' (and queries') sparse vectors to the files of Anserini (JsonVectorCollection,
pretokenized topics), OpenSearch / Elasticsearch (`_bulk`) and Qdrant (points, query bodies); `anserini` indexes and
searches that export with the real Anserini jar (`python -m vtlab.export.anserini <dir>`).
"""
