"""Vocabularies: canonical-form overlap between tokenizers (canonical) and the `vocab` config group (targets)."""

from vtlab.vocab.canonical import (
    Overlap,
    canonical_form,
    canonical_vocab,
    match_vocabularies,
    special_token_pairs,
    tokenizer_kind,
)
from vtlab.vocab.targets import CorpusWordPiece, NativeVocab, Normalizer, PretrainedVocab, TargetVocab, VocabConfigError

__all__ = [
    "CorpusWordPiece",
    "NativeVocab",
    "Normalizer",
    "Overlap",
    "PretrainedVocab",
    "TargetVocab",
    "VocabConfigError",
    "canonical_form",
    "canonical_vocab",
    "match_vocabularies",
    "special_token_pairs",
    "tokenizer_kind",
]
