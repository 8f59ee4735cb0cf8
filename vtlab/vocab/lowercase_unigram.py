"""A cased SentencePiece-unigram vocabulary (XLM-R, e5, mmBERT, gte-multilingual) restricted to its lowercase pieces:
the target that makes VT change nothing but case for that family, as vtlab/vocab/lowercase_bpe.py does for BPE.

The unigram segmentation of a lowercase text only ever uses pieces that occur in it, all lowercase; dropping the
pieces with an uppercase letter therefore leaves the best segmentation of every lowercased text unchanged. The
restricted tokenizer lowercases its input itself (before the source's normalizer, as the lowercased-input arm does,
and once more after it, for the few compatibility characters NFKC expands into capitals, e.g. "㎒" → "MHz"), so it
segments any text exactly as the source segments `text.lower()` — except for such characters (the lowercased-input
arm keeps their capitals; this vocabulary has none) and texts holding a special token's literal text. Kept: every
piece without an uppercase letter and every special token with its role; ids are renumbered densely in the source's
order, so every kept piece is a source piece and VT onto it copies each row. Built once into `cache_dir("vocab")`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from vtlab.backbones import Backbone
from vtlab.core.assets import source_key
from vtlab.core.errors import VtlabError
from vtlab.vocab.lowercase_bpe import FINAL_SIGMA, has_uppercase, renumber_post_processor
from vtlab.vocab.targets import CachedTokenizerVocab, Preprocess, PretrainedVocab

_RECIPE = "lowercase-unigram-v1"  # bump when the build changes, so old caches are not reused


class LowercaseUnigram(CachedTokenizerVocab):
    """`source`'s SentencePiece-unigram vocabulary restricted to its lowercase pieces, lowercasing its input.

    `source`: a Backbone (e.g. vtlab.backbones.E5Small) or a tokenizer hub id / directory / asset:NAME. No model has
    embeddings in it (`embedding_source()` is None): with `init=subword` every row is copied from its source row."""

    def __init__(self, name: str, source: str | Backbone, preprocess: Preprocess | None = None) -> None:
        super().__init__(name, preprocess)
        if not source:
            raise VtlabError(
                f"vocab.source must name a SentencePiece-unigram tokenizer (a backbone, hub id, directory or "
                f"asset:NAME) for {name}"
            )
        self.source = source

    def _params(self) -> dict[str, object]:
        import tokenizers

        return {"recipe": _RECIPE, "tokenizers": tokenizers.__version__, "source": source_key(self.source)}

    def source_tokenizer(self) -> PreTrainedTokenizerBase:
        return PretrainedVocab(self.name, self.source).load_tokenizer(None)

    def _build(self) -> tuple[PreTrainedTokenizerBase, dict[str, Any]]:
        from tokenizers import Regex, Tokenizer, normalizers
        from transformers import PreTrainedTokenizerFast

        src = self.source_tokenizer()
        spec = json.loads(src.backend_tokenizer.to_str())
        model = spec.get("model") or {}
        if model.get("type") != "Unigram":
            raise VtlabError(f"vocab={self.name}: the source tokenizer ({self.source}) is not a SentencePiece unigram")
        pieces: list[list[Any]] = model["vocab"]
        added = {a["id"]: a for a in spec["added_tokens"]}
        kept_ids = [
            i for i, (piece, _) in enumerate(pieces) if added.get(i, {}).get("special") or not has_uppercase(piece)
        ]
        new_id = {old: new for new, old in enumerate(kept_ids)}
        if model.get("unk_id") not in new_id:
            raise VtlabError(f"vocab={self.name}: the source's unknown piece is not a special token")
        model["vocab"] = [pieces[i] for i in kept_ids]
        model["unk_id"] = new_id[model["unk_id"]]
        spec["added_tokens"] = [{**a, "id": new_id[i]} for i, a in added.items() if i in new_id]
        by_token = {a["content"]: a["id"] for a in spec["added_tokens"]} | {
            p: new_id[i] for i, (p, _) in enumerate(pieces) if i in new_id
        }
        try:
            renumber_post_processor(spec.get("post_processor"), by_token)
        except KeyError as e:
            raise VtlabError(f"vocab={self.name}: the post-processor's special token {e} was dropped") from None
        source_normalizer = src.backend_tokenizer.normalizer
        spec["normalizer"] = None
        tk = Tokenizer.from_str(json.dumps(spec))
        lower = [normalizers.Replace(Regex(FINAL_SIGMA), "ς"), normalizers.Lowercase()]
        tk.normalizer = normalizers.Sequence(
            lower + ([source_normalizer, normalizers.Lowercase()] if source_normalizer is not None else [])
        )
        tk = Tokenizer.from_str(tk.to_str())  # rebuilt: added tokens' match patterns come from the final normalizer
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=tk, model_max_length=src.model_max_length, **src.special_tokens_map
        )
        stats = {"source_size": len(src), "kept": len(kept_ids), "dropped": len(src) - len(kept_ids)}
        return tokenizer, stats

    def _write(self, tmp: Path) -> None:
        tokenizer, stats = self._build()
        tokenizer.save_pretrained(tmp)
        (tmp / "vtlab_vocab.json").write_text(json.dumps({**self._params(), **stats}, indent=1, sort_keys=True))

    def stats(self) -> dict[str, Any]:
        return json.loads((self.materialize() / "vtlab_vocab.json").read_text())

    def embedding_source(self) -> None:
        return None

    def describe(self) -> str:
        s, source = self.stats(), getattr(self.source, "name", self.source)
        return (
            f"vocab={self.name}: {source}'s SentencePiece-unigram vocabulary restricted to its lowercase pieces, input "
            f"lowercased; kept {s['kept']:,} of {s['source_size']:,} ids (dropped {s['dropped']:,} with an uppercase "
            "letter); every piece is a source piece, so VT onto it copies rows"
        )
