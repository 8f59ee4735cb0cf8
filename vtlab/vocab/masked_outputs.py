"""Lionis et al.'s masked lowercase arm ("To Case or Not to Case", ECIR 2026): a cased model read through lowercased
input, with the output rows of its cased tokens switched off, i.e. the output space of its lowercase tokens.

`CasedOutputsMasked` keeps the backbone's tokenizer, lowercases the input (a `Normalizer`, by default with the leading
blank of the BPE baseline) and derives the run's model from the source one: every token whose text holds an uppercase
letter (special tokens never) gets decoder row 0 and decoder bias MASKED_BIAS. vtlab.vocab.transfer.cached_transfer
builds and caches that model like a transfer (`DERIVES_MODEL`, `derive_model`), so every stage (MLM adaptation, APC,
fine-tuning, encoding, export) loads the same one.

Why the bias and not the row alone: a logit of 0 stays dead under SPLADE's relu, but the MLM adaptation's softmax
still gives it probability, pushes gradient into row and bias and revives it. At -1e4 the softmax probability
underflows to exactly 0 (fp32 and bf16) and so does the relu: no loss moves those rows and they never activate.
What can still move them (tests/method/test_masked_outputs.py): the decoder is tied to the input embeddings, and MLM
collators feed random ids as noise inputs (10% of the masked positions), cased ones included; such a row leaves 0 by
an amount on the order of lr × steps, far too little to lift its logit from -1e4. APC leaves such switched-off terms
as they are in every form (vtlab/apc/calibration.py), per-term APC included.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from vtlab.core.errors import VtlabError
from vtlab.vocab.canonical import BYTES_MARK, canonical_vocab
from vtlab.vocab.targets import Normalizer, Preprocess, TargetVocab, VocabConfigError

RECIPE = "v1"  # bump when the derived model changes, so old caches are not reused
MASKED_BIAS = -1e4
LOWERCASE_INPUT = Normalizer(lowercase=True, blank_prefix=True)  # the authors' blank_prefix_lower BPE baseline
_PROBE = "The ÉCOLE in Paris"  # what a preprocess must lowercase


def cased_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Ids of the tokens whose text holds an uppercase letter, never a special token. A byte-level token is read as the
    UTF-8 text of its bytes: a piece of a multi-byte character ("Ã", byte 0xC3) has no letters; added tokens
    ("|||IP_ADDRESS|||") are read as their literal text."""
    return sorted(
        i
        for i, form in canonical_vocab(tokenizer).items()
        if not form.startswith(BYTES_MARK) and any(c.isupper() for c in form)
    )


class CasedOutputsMasked(TargetVocab):
    """The backbone's own tokenizer on lowercased input, the cased tokens' output rows masked (weight 0, bias -1e4).

    `transfers` is true: the vocabulary is the backbone's, but the run loads a model derived from it, through every
    path that loads a transferred one (vtlab.vocab.transfer.transferred_backbone, the vocab_transfer callback, stage
    transfer).
    """

    CACHE_ID = "cased-outputs-masked"
    DERIVES_MODEL = True

    def __init__(self, name: str, preprocess: Preprocess | None = LOWERCASE_INPUT) -> None:
        # the masked tokens must be the ones the input can never hold: otherwise their rows would be live inputs
        if preprocess is None or any(c.isupper() for c in preprocess(_PROBE)):
            raise VocabConfigError(
                f"vocab.preprocess={preprocess!r} must lowercase the input for vocab={name} (its "
                "cased output rows are masked), e.g. vtlab.vocab.targets.Normalizer(lowercase=true)"
            )
        super().__init__(name, preprocess)

    @property
    def transfers(self) -> bool:
        return True

    def load_tokenizer(self, source_tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
        return source_tokenizer

    def cache_key(self) -> str:
        # the preprocess is not in it: it does not change the derived model (the MLM cache keys it on its own)
        return f"{self.CACHE_ID}:{self.name}:recipe={RECIPE}:bias={MASKED_BIAS:g}"

    def derive_model(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> dict[str, Any]:
        """Mask `model`'s cased output rows in place; returns the report."""
        start = time.perf_counter()
        decoder = model.get_output_embeddings()
        if decoder is None or decoder.bias is None:  # Backbone.load_model gives every decoder a bias
            raise VtlabError(f"vocab={self.name}: {type(model).__name__} has no MLM decoder bias to mask with")
        ids = cased_ids(tokenizer)
        rows = torch.as_tensor(ids, dtype=torch.long)
        with torch.no_grad():
            decoder.weight[rows] = 0.0  # tied: the input rows too, which lowercased input never reads
            decoder.bias[rows] = MASKED_BIAS
        size = decoder.weight.shape[0]
        return {
            "recipe": RECIPE,
            "masked_outputs": len(ids),
            "vocab_size": size,
            "output_bias": MASKED_BIAS,
            "tied_input_rows": decoder.weight is model.get_input_embeddings().weight,
            "examples": tokenizer.convert_ids_to_tokens(ids[:: max(1, len(ids) // 8)][:8]),
            # the keys stage transfer prints
            "overlap": f"the backbone's own vocabulary; {len(ids)} of {size} output rows masked",
            "init": "none: the source model's rows",
            "seconds": time.perf_counter() - start,
        }

    def describe(self) -> str:
        return (
            f"vocab={self.name}: the backbone's own tokenizer, input preprocessed by {self.preprocess!r}, every "
            f"output row of a token with an uppercase letter masked (weight 0, bias {MASKED_BIAS:g})"
        )
