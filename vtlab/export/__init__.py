"""Interop: vtlab encoders as sentence-transformers SparseEncoder directories, document vectors for search engines.

`sentence_transformers.export_sentence_transformers` writes a directory `SparseEncoder(path)` loads as is;
`vectors.write_vectors` streams documents' sparse vectors to Anserini JsonVectorCollection and OpenSearch bulk files.
"""
