"""A cased byte-level BPE restricted to its lowercase tokens (U): the target that makes VT change nothing but case.

VT from a cased-BPE model onto bert-base-uncased swaps the segmentation along with the case handling (and, in the
testbed, sends M_bpe "home" to SPLADE-tiny's own rows). U keeps the source BPE's segmentation and removes only case:
its normalizer lowercases and adds one leading blank, and its vocabulary is every source token that lowercased text
can produce, so `U.tokenize(t)` gives exactly the source tokens of `" " + t.lower()` (the blank-prefix-lower arm,
`vtlab.vocab.targets.Normalizer(lowercase=True, blank_prefix=True)` before the cased BPE). Kept:

- every vocabulary token whose bytes, decoded from the byte-level alphabet, hold no uppercase letter (a letter that
  `str.lower` changes). Bytes that are no UTF-8 character on their own (a piece of a multi-byte character) hold no
  letter and stay, so every lowercase text stays encodable; the single-byte tokens "A".."Z" go;
- every special token ([CLS], [SEP], [MASK], [PAD], [UNK], <|endoftext|>, …) with its role, although "[CLS]" has
  capitals; non-special added tokens follow the letter rule (OLMo's "|||IP_ADDRESS|||" placeholders go: lowercased
  text never holds them, and U would otherwise match " |||ip_address|||");
- exactly the merges (a, b) whose a, b and a + b are all kept. BPE on lowercased text only ever builds tokens of that
  text, which are all kept, so it applies the same merges in the same order as the source.

Ids are renumbered densely in the source's order. Every U token is a source token, so VT from a model in the source
vocabulary onto U copies each row from the same token's row. Not quite all of them today: `match_vocabularies` pairs
special tokens by role (cls, sep, pad, mask, unk) only, so OLMo's role-less specials <|padding|> and <|endoftext|>
(2 of 37,340 rows) are "new" and get the init's rule for specials (`init=subword`: the overlap mean); pairing leftover
specials by text there would make the overlap 100%, and then `Initializer.__call__` returns before any fill rule.
Built once into `cache_dir("vocab")`; the key holds the source's cache key, the recipe and the tokenizers version.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from vtlab.backbones import Backbone
from vtlab.core.assets import source_key
from vtlab.core.errors import VtlabError
from vtlab.vocab.canonical import bytelevel_bytes, tokenizer_kind
from vtlab.vocab.targets import CachedTokenizerVocab, Preprocess, PretrainedVocab

log = logging.getLogger(__name__)

_RECIPE = "lowercase-bpe-v1"  # bump when the build changes, so old caches are not reused

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


class LowercaseBPE(CachedTokenizerVocab):
    """`source`'s byte-level BPE restricted to its lowercase tokens, lowercasing and blank-prefixing its input.

    `source`: a Backbone-like object with `load_tokenizer()` and `cache_key()` (e.g. vtlab.backbones.TinyModernBert,
    ModernBERT's cased OLMo BPE) or a tokenizer hub id / directory / asset:NAME (loaded as PretrainedVocab does).
    No model has embeddings in U (`embedding_source()` is None), and none is needed: with `init=subword` (or any
    init but all-random) every row is copied from the same token's source row but those of role-less specials (see
    the module docstring).

    Identical segmentation to the source on `" " + t.lower()` except for texts holding a special token's literal
    text ("[CLS]" in the text: U matches it, the lowercased arm cannot), an empty text (no blank) and characters newer
    than Python's Unicode tables (tokenizers lowercases them, str.lower does not).
    """

    def __init__(self, name: str, source: str | Backbone, preprocess: Preprocess | None = None) -> None:
        super().__init__(name, preprocess)
        if not source:
            raise VtlabError(
                f"vocab.source must name a byte-level BPE tokenizer (a backbone, hub id, directory or "
                f"asset:NAME) for {name}"
            )
        self.source = source

    def _params(self) -> dict[str, object]:
        import tokenizers

        return {"recipe": _RECIPE, "tokenizers": tokenizers.__version__, "source": source_key(self.source)}

    def source_tokenizer(self) -> PreTrainedTokenizerBase:
        """The cased tokenizer U is cut from (loaded, with its one-line errors, as PretrainedVocab loads one)."""
        return PretrainedVocab(self.name, self.source).load_tokenizer(None)

    def _build(self) -> tuple[PreTrainedTokenizerBase, dict[str, Any]]:
        from tokenizers import Regex, Tokenizer, normalizers
        from transformers import PreTrainedTokenizerFast

        src = self.source_tokenizer()
        spec = json.loads(src.backend_tokenizer.to_str())
        if (spec.get("model") or {}).get("type") != "BPE" or tokenizer_kind(src) != "bytelevel":
            raise VtlabError(f"vocab={self.name}: the source tokenizer ({self.source}) is not a byte-level BPE")
        vocab: dict[str, int] = spec["model"]["vocab"]
        added = {a["id"]: a for a in spec["added_tokens"]}
        text = {i: token_text(t) for t, i in vocab.items()} | {i: a["content"] for i, a in added.items()}
        kept_ids = sorted(i for i, t in text.items() if added.get(i, {}).get("special") or not has_uppercase(t))
        new_id = {old: new for new, old in enumerate(kept_ids)}
        spec["model"]["vocab"] = {t: new_id[i] for t, i in vocab.items() if i in new_id}
        kept = spec["model"]["vocab"]
        pairs = [m.split(" ") if isinstance(m, str) else m for m in spec["model"]["merges"]]
        spec["model"]["merges"] = [[a, b] for a, b in pairs if a in kept and b in kept and a + b in kept]
        spec["added_tokens"] = [{**a, "id": new_id[i]} for i, a in added.items() if i in new_id]
        by_token = {a["content"]: a["id"] for a in spec["added_tokens"]} | kept
        try:
            renumber_post_processor(spec.get("post_processor"), by_token)
        except KeyError as e:
            raise VtlabError(f"vocab={self.name}: the post-processor's special token {e} was dropped") from None

        source_normalizer = src.backend_tokenizer.normalizer
        exempt = [a["content"].lower() for a in spec["added_tokens"] if a["normalized"]]
        steps = [normalizers.Replace(Regex(FINAL_SIGMA), "ς"), normalizers.Lowercase(), normalizers.Prepend(" ")]
        if (unblank := _unblank_pattern(exempt)) is not None:
            steps.append(normalizers.Replace(Regex(unblank), ""))
        spec["normalizer"] = None
        tk = Tokenizer.from_str(json.dumps(spec))
        tk.normalizer = normalizers.Sequence(steps + ([source_normalizer] if source_normalizer is not None else []))
        tk = Tokenizer.from_str(tk.to_str())  # rebuilt: added tokens' match patterns come from the final normalizer
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=tk, model_max_length=src.model_max_length, **src.special_tokens_map
        )
        stats = {
            "source_size": len(src),
            "kept": len(kept_ids),
            "dropped": len(src) - len(kept_ids),
            "source_merges": len(pairs),
            "kept_merges": len(spec["model"]["merges"]),
            "dropped_added": sorted(a["content"] for i, a in added.items() if i not in new_id),
        }
        return tokenizer, stats

    def _write(self, tmp: Path) -> None:
        tokenizer, stats = self._build()
        tokenizer.save_pretrained(tmp)
        (tmp / "vtlab_vocab.json").write_text(json.dumps({**self._params(), **stats}, indent=1, sort_keys=True))

    def stats(self) -> dict[str, Any]:
        """The build record (vtlab_vocab.json): source size, tokens kept and dropped, merges kept, dropped added."""
        return json.loads((self.materialize() / "vtlab_vocab.json").read_text())

    def embedding_source(self) -> None:
        return None

    def describe(self) -> str:
        s, source = self.stats(), getattr(self.source, "name", self.source)
        return (
            f"vocab={self.name}: {source}'s byte-level BPE restricted to its lowercase tokens, input "
            f"lowercased with one leading blank; kept {s['kept']:,} of {s['source_size']:,} ids (dropped "
            f"{s['dropped']:,} with an uppercase letter) and {s['kept_merges']:,} of {s['source_merges']:,} "
            f"merges; every token is a source token, so VT onto it copies rows"
        )
