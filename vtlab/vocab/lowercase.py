"""A cased vocabulary restricted to its lowercase tokens: the VT target that changes nothing but case.

VT from a cased model onto an uncased vocabulary such as bert-base-uncased swaps the segmentation along with the case
handling. This target keeps the source's segmentation and removes only case: its normalizer lowercases (optionally
adding one leading blank), and its vocabulary is every source token that lowercased text can produce. Two families:

- a byte-level BPE (ModernBERT's OLMo BPE, `vocab=olmo-lowercase`, with `blank_prefix: true`): `U.tokenize(t)` gives
  exactly the source tokens of `" " + t.lower()`, the blank-prefix-lower arm
  (`vtlab.vocab.targets.Normalizer(lowercase=True, blank_prefix=True)` before the cased BPE). A token is judged by its
  bytes decoded from the byte-level alphabet; bytes that are no UTF-8 character on their own (a piece of a multi-byte
  character) hold no letter and stay, so every lowercase text stays encodable; the single-byte tokens "A".."Z" go.
  Exactly the merges (a, b) whose a, b and a + b are all kept stay: BPE on lowercased text only ever builds tokens of
  that text, which are all kept, so it applies the same merges in the same order as the source.
- a SentencePiece unigram (XLM-R, e5, mmBERT, gte-multilingual; `vocab=e5-lowercase`): the unigram segmentation of a
  lowercase text only ever uses pieces that occur in it, all lowercase; dropping the pieces with an uppercase letter
  therefore leaves the best segmentation of every lowercased text unchanged, as the lowercased-input arm's.

Kept: every token without an uppercase letter (a letter that `str.lower` changes) and every special token ([CLS],
<|endoftext|>, <unk>, …) with its role, although "[CLS]" has capitals; non-special added tokens follow the letter rule
(OLMo's "|||IP_ADDRESS|||" placeholders go: lowercased text never holds them). The input is lowercased before the
source's normalizer and once more after it, for the few compatibility characters NFKC expands into capitals
("㎒" → "MHz"). Segmentation equals the arm's except for texts holding a special token's literal text ("[CLS]" in
the text: U matches it, the lowercased arm cannot), such NFKC characters, an empty text (no blank) and characters
newer than Python's Unicode tables (tokenizers lowercases them, str.lower does not).

Ids are renumbered densely in the source's order. Every kept token is a source token, so VT onto it copies each row
from the same token's row. Not quite all of them: `match_vocabularies` pairs special tokens by role (cls, sep, pad,
mask, unk) only, so OLMo's role-less specials <|padding|> and <|endoftext|> (2 of 37,340 rows) are "new" and get the
init's rule for specials (`init=subword`: the overlap mean). Built once into `cache_dir("vocab")`; the key holds the
source's cache key, `blank_prefix`, the recipe and the tokenizers version.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from vtlab.backbones import Backbone
from vtlab.core.assets import source_key
from vtlab.core.errors import VtlabError
from vtlab.core.json_files import read_json
from vtlab.vocab.canonical import TokenizerKind, bytelevel_bytes, tokenizer_kind
from vtlab.vocab.targets import CachedTokenizerVocab, Preprocess, PretrainedVocab

_RECIPE = "lowercase-v1"  # bump when the build changes, so old caches are not reused

# Python's str.lower() maps a capital sigma to final "ς" at the end of a word (Unicode's Final_Sigma context:
# preceded by a cased letter, case-ignorables skipped, and not followed by one); tokenizers' Lowercase maps each
# character alone ("σ"). This rewrite, before Lowercase, makes "ΟΔΟΣ" "οδος" as Python does. Variable-length
# look-behind is fine in tokenizers' Oniguruma regexes.
_CASED = r"[\p{Cased}&&\P{Case_Ignorable}]"
FINAL_SIGMA = rf"(?<={_CASED}\p{{Case_Ignorable}}*)Σ(?!\p{{Case_Ignorable}}*{_CASED})"


def has_uppercase(text: str) -> bool:
    """Whether lowercasing changes `text`, one character at a time (so no context rule such as Final_Sigma)."""
    return any(c.lower() != c for c in text)


def token_text(token: str) -> str:
    """What a byte-level token stands for; bytes that are no whole UTF-8 character read as U+FFFD (no letter)."""
    raw = bytelevel_bytes(token)
    return token if raw is None else raw.decode("utf-8", errors="replace")


def _unblank_pattern(exempt: list[str]) -> str | None:
    """The blank that `Prepend(" ")` put before a text that is exactly one of `exempt` (None: nothing to undo).

    tokenizers matches a `normalized` added token by its text run through the tokenizer's normalizer, so Prepend alone
    would make OLMo's two-space token match three spaces; removing the blank again from such texts keeps every added
    token's match pattern its own text. (A zero-width "prepend unless" Replace would do it in one step, but tokenizers
    0.23 panics aligning offsets for zero-width matches.)"""
    if not exempt:
        return None
    return r"\A (?=(?:" + "|".join(re.escape(t) for t in sorted(exempt, key=len, reverse=True)) + r")\z)"


def renumber_post_processor(node: Any, new_id: dict[str, int]) -> None:
    """Point the post-processor's special tokens at their new ids: TemplateProcessing's {"tokens", "ids"} entries and
    Bert/RobertaProcessing's [token, id] pairs, nested in Sequence processors too."""
    if isinstance(node, dict):
        if isinstance(node.get("tokens"), list) and isinstance(node.get("ids"), list):
            node["ids"] = [new_id[t] for t in node["tokens"]]
        for value in node.values():
            renumber_post_processor(value, new_id)
    elif isinstance(node, list):
        if len(node) == 2 and isinstance(node[0], str) and isinstance(node[1], int) and node[0] in new_id:
            node[1] = new_id[node[0]]
            return
        for value in node:
            renumber_post_processor(value, new_id)


# ---- what differs between the families: how the model lists its tokens, what a token's text is, what else to cut


def _bpe_tokens(model: dict[str, Any]) -> dict[int, str]:
    return {i: t for t, i in model["vocab"].items()}


def _bpe_restrict(model: dict[str, Any], new_id: dict[int, int]) -> dict[str, Any]:
    """Keep the kept tokens' entries (renumbered) and the merges made of kept tokens only."""
    model["vocab"] = kept = {t: new_id[i] for t, i in model["vocab"].items() if i in new_id}
    pairs = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]
    model["merges"] = [[a, b] for a, b in pairs if a in kept and b in kept and a + b in kept]
    return {"source_merges": len(pairs), "kept_merges": len(model["merges"])}


def _unigram_tokens(model: dict[str, Any]) -> dict[int, str]:
    return {i: piece for i, (piece, _) in enumerate(model["vocab"])}


def _unigram_restrict(model: dict[str, Any], new_id: dict[int, int]) -> dict[str, Any]:
    """Keep the kept pieces (with their scores) in order; the unknown piece must be one of them."""
    if model.get("unk_id") not in new_id:
        raise VtlabError("the source's unknown piece is not a special token")
    model["vocab"] = [entry for i, entry in enumerate(model["vocab"]) if i in new_id]
    model["unk_id"] = new_id[model["unk_id"]]
    return {}


@dataclass(frozen=True)
class Family:
    """A tokenizer model type this target restricts: the vocabulary format it must come with, its tokens by id, the
    text a token stands for (for the letter rule), and the restriction of the model's own tables."""

    words: str  # in messages and describe()
    kind: TokenizerKind
    tokens: Callable[[dict[str, Any]], dict[int, str]]
    text: Callable[[str], str]
    restrict: Callable[[dict[str, Any], dict[int, int]], dict[str, Any]]


# tokenizer.json's model.type -> its family
FAMILIES: dict[str, Family] = {
    "BPE": Family("byte-level BPE", "bytelevel", _bpe_tokens, token_text, _bpe_restrict),
    "Unigram": Family("SentencePiece-unigram vocabulary", "sentencepiece", _unigram_tokens, str, _unigram_restrict),
}


class LowercaseVocab(CachedTokenizerVocab):
    """`source`'s vocabulary (a byte-level BPE or a SentencePiece unigram) restricted to its lowercase tokens,
    lowercasing its input, and prefixing one blank to it when `blank_prefix` (the blank-prefix-lower arm's input).

    `source`: a Backbone-like object with `load_tokenizer()` and `cache_key()` (e.g. vtlab.backbones.TinyModernBert,
    ModernBERT's cased OLMo BPE; vtlab.backbones.E5Small) or a tokenizer hub id / directory / asset:NAME (loaded as
    PretrainedVocab does). No model has embeddings in it (`embedding_source()` is None), and none is needed: with
    `init=subword` (or any init but all-random) every row is copied from the same token's source row but those of
    role-less specials (see the module docstring).
    """

    def __init__(
        self, name: str, source: str | Backbone, blank_prefix: bool, preprocess: Preprocess | None = None
    ) -> None:
        super().__init__(name, preprocess)
        if not source:
            raise VtlabError(
                f"vocab.source must name a byte-level BPE or SentencePiece-unigram tokenizer (a backbone, hub id, "
                f"directory or asset:NAME) for {name}"
            )
        if not isinstance(blank_prefix, bool):
            raise VtlabError(f"vocab.blank_prefix={blank_prefix!r}: expected true or false")
        self.source = source
        self.blank_prefix = blank_prefix

    def _params(self) -> dict[str, object]:
        import tokenizers

        return {
            "recipe": _RECIPE,
            "tokenizers": tokenizers.__version__,
            "source": source_key(self.source),
            "blank_prefix": self.blank_prefix,
        }

    def source_tokenizer(self) -> PreTrainedTokenizerBase:
        """The cased tokenizer this one is cut from (loaded, with its one-line errors, as PretrainedVocab loads one)."""
        return PretrainedVocab(self.name, self.source).load_tokenizer(None)

    def _family(self, src: PreTrainedTokenizerBase, model: dict[str, Any]) -> Family:
        family = FAMILIES.get(model.get("type"))
        if family is None or tokenizer_kind(src) != family.kind:
            raise VtlabError(
                f"vocab={self.name}: the source tokenizer ({self.source}) is a {tokenizer_kind(src)} "
                f"{model.get('type')}; expected one of: {', '.join(f.words for f in FAMILIES.values())}"
            )
        return family

    def _normalizer(self, added_tokens: list[dict[str, Any]], source_normalizer: Any) -> Any:
        """Final sigma, lowercase, the blank (undone for normalized added tokens), the source's normalizer, and
        lowercase again after it."""
        from tokenizers import Regex, normalizers

        steps = [normalizers.Replace(Regex(FINAL_SIGMA), "ς"), normalizers.Lowercase()]
        if self.blank_prefix:
            steps.append(normalizers.Prepend(" "))
            exempt = [a["content"].lower() for a in added_tokens if a["normalized"]]
            if (unblank := _unblank_pattern(exempt)) is not None:
                steps.append(normalizers.Replace(Regex(unblank), ""))
        if source_normalizer is not None:
            steps += [source_normalizer, normalizers.Lowercase()]
        return normalizers.Sequence(steps)

    def _build(self) -> tuple[PreTrainedTokenizerBase, dict[str, Any]]:
        from tokenizers import Tokenizer
        from transformers import PreTrainedTokenizerFast

        src = self.source_tokenizer()
        spec = json.loads(src.backend_tokenizer.to_str())
        model = spec.get("model") or {}
        family = self._family(src, model)
        added = {a["id"]: a for a in spec["added_tokens"]}
        old_tokens = family.tokens(model)
        text = {i: family.text(t) for i, t in old_tokens.items()} | {i: a["content"] for i, a in added.items()}
        kept_ids = sorted(i for i, t in text.items() if added.get(i, {}).get("special") or not has_uppercase(t))
        new_id = {old: new for new, old in enumerate(kept_ids)}
        try:
            stats = family.restrict(model, new_id)
        except VtlabError as e:
            raise VtlabError(f"vocab={self.name}: {e}") from None
        spec["added_tokens"] = [{**a, "id": new_id[i]} for i, a in added.items() if i in new_id]
        by_token = {a["content"]: a["id"] for a in spec["added_tokens"]}
        by_token |= {old_tokens[i]: n for i, n in new_id.items() if i in old_tokens}
        try:
            renumber_post_processor(spec.get("post_processor"), by_token)
        except KeyError as e:
            raise VtlabError(f"vocab={self.name}: the post-processor's special token {e} was dropped") from None

        source_normalizer = src.backend_tokenizer.normalizer
        spec["normalizer"] = None
        tk = Tokenizer.from_str(json.dumps(spec))
        tk.normalizer = self._normalizer(spec["added_tokens"], source_normalizer)
        tk = Tokenizer.from_str(tk.to_str())  # rebuilt: added tokens' match patterns come from the final normalizer
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=tk, model_max_length=src.model_max_length, **src.special_tokens_map
        )
        stats |= {
            "family": model["type"],
            "source_size": len(src),
            "kept": len(kept_ids),
            "dropped": len(src) - len(kept_ids),
            "dropped_added": sorted(a["content"] for i, a in added.items() if i not in new_id),
        }
        return tokenizer, stats

    def _write(self, tmp: Path) -> None:
        tokenizer, stats = self._build()
        tokenizer.save_pretrained(tmp)
        (tmp / "vtlab_vocab.json").write_text(json.dumps({**self._params(), **stats}, indent=1, sort_keys=True))

    def stats(self) -> dict[str, Any]:
        """The build record (vtlab_vocab.json): family, source size, tokens kept and dropped, merges kept (BPE),
        added tokens dropped."""
        return read_json(self.materialize() / "vtlab_vocab.json", what="the tokenizer's build record")

    def embedding_source(self) -> None:
        return None

    def describe(self) -> str:
        s, source = self.stats(), getattr(self.source, "name", self.source)
        merges = f" and {s['kept_merges']:,} of {s['source_merges']:,} merges" if "kept_merges" in s else ""
        return (
            f"vocab={self.name}: {source}'s {FAMILIES[s['family']].words} restricted to its lowercase tokens, input "
            f"lowercased{' with one leading blank' if self.blank_prefix else ''}; kept {s['kept']:,} of "
            f"{s['source_size']:,} ids (dropped {s['dropped']:,} with an uppercase letter){merges}; every token is a "
            "source token, so VT onto it copies rows"
        )
