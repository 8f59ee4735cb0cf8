"""The `vocab` config group: which vocabulary a run uses, and how input text is normalized.

`conf/vocab/<name>.yaml` instantiates one of these. `NativeVocab` keeps the backbone's tokenizer (optionally with a
`Normalizer` as the input-normalization baselines); `PretrainedVocab` and `CorpusWordPiece` are transfer targets.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from vtlab.backbones import Backbone
from vtlab.core import integrity
from vtlab.core.assets import cache_dir, resolve, source_key
from vtlab.core.atomic import json_hash, stable_hash
from vtlab.core.cache_keys import key_data
from vtlab.core.errors import AssetError, VtlabError

log = logging.getLogger(__name__)

Preprocess = Callable[[str], str]


class VocabConfigError(VtlabError, ValueError):
    """A bad `vocab.*` config value; the message names the key."""


# -- input normalization (the authors' to_lower / blank_prefix / blank_prefix_lower) -----------------------------------
@dataclass(frozen=True)
class Normalizer:
    """Picklable text preprocessor: optional lowercasing, then optionally one leading space.

    The leading space makes a byte-level BPE see the first word as word-initial ("Ġword"), like every later word.
    A class (not a lambda) so DataLoader workers can pickle it and Hydra can build it from YAML; a dataclass, so that
    caches of what it preprocesses are keyed by its settings (vtlab.core.cache_keys).
    """

    lowercase: bool = False
    blank_prefix: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "lowercase", bool(self.lowercase))
        object.__setattr__(self, "blank_prefix", bool(self.blank_prefix))

    def __call__(self, text: str) -> str:
        if self.lowercase:
            text = text.lower()
        return " " + text if self.blank_prefix else text


def to_lower(text: str) -> str:
    return text.lower()


def blank_prefix(text: str) -> str:
    return " " + text


def blank_prefix_lower(text: str) -> str:
    return " " + text.lower()


# -- base --------------------------------------------------------------------------------------------------------------
class TargetVocab:
    """A run's vocabulary. `transfers`: whether the backbone must be moved onto a different tokenizer."""

    # The class's name in cache keys (`cache_key`): a fixed string, not the class's module path, so moving or renaming
    # the class keeps its caches; change it only to rebuild them on purpose. (CachedTokenizerVocab's keys hash its
    # `_params()` instead, whose "recipe" plays this part.)
    CACHE_ID: ClassVar[str]
    # True: the run's model is the source model changed by `derive_model` (cached per backbone and vocabulary; no init,
    # no transfer options), not a transfer onto `load_tokenizer`'s vocabulary
    DERIVES_MODEL: ClassVar[bool] = False
    name: str
    preprocess: Preprocess | None

    def __init__(self, name: str, preprocess: Preprocess | None = None) -> None:
        self.name = name
        self.preprocess = preprocess

    @property
    def transfers(self) -> bool:
        return True

    def load_tokenizer(self, source_tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
        """The tokenizer the run will use (the source model's own one when nothing is transferred)."""
        raise NotImplementedError

    def embedding_source(self) -> str | None:
        """name_or_path of a masked LM whose input embeddings (and MLM bias) live in this vocabulary, or None."""
        return None

    def derive_model(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> dict[str, Any]:
        """Change the source `model` (on its `tokenizer`) in place into the run's model and return the report
        (vtlab.vocab.transfer.cached_transfer calls it when DERIVES_MODEL is true)."""
        raise NotImplementedError(f"{type(self).__name__} derives no model (DERIVES_MODEL is false)")

    def cache_key(self) -> str:
        """Stable string naming this vocabulary for caches of transferred models."""
        raise NotImplementedError

    def describe(self) -> str:
        return f"vocab={self.name}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class NativeVocab(TargetVocab):
    """The backbone's own tokenizer; `preprocess` turns it into the lowercase / blank-prefix baselines."""

    CACHE_ID = "native"

    @property
    def transfers(self) -> bool:
        return False

    def load_tokenizer(self, source_tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
        return source_tokenizer

    def cache_key(self) -> str:
        return f"{self.CACHE_ID}:{self.name}"

    def describe(self) -> str:
        how = f"input preprocessed by {self.preprocess!r}" if self.preprocess is not None else "no preprocessing"
        return f"vocab={self.name}: the backbone's own tokenizer, {how}"


# -- a pretrained tokenizer (e.g. bert-base-uncased) -------------------------------------------------------------------
class PretrainedVocab(TargetVocab):
    """An existing tokenizer (hub id, local dir or asset:NAME), with an optional model whose embeddings use it."""

    CACHE_ID = "pretrained"

    def __init__(
        self,
        name: str,
        tokenizer: str | Backbone,
        embedding_model: str | Backbone | None = None,
        preprocess: Preprocess | None = None,
    ) -> None:
        super().__init__(name, preprocess)
        if not tokenizer:
            raise VocabConfigError(
                f"vocab.tokenizer must name a tokenizer (hub id, directory or asset:NAME) for {name}"
            )
        self.tokenizer = tokenizer
        self.embedding_model = embedding_model

    def load_tokenizer(self, source_tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
        from transformers import AutoTokenizer

        if hasattr(self.tokenizer, "load_tokenizer"):  # a Backbone object, e.g. TinyModernBert's real OLMo BPE
            return self.tokenizer.load_tokenizer()
        # Backbone's loader gives the quick offline check and one-line errors; we only rename the blamed key.
        return Backbone(self.tokenizer)._load(AutoTokenizer.from_pretrained, resolve(self.tokenizer), "vocab.tokenizer")

    def embedding_source(self) -> str | Backbone | None:
        return self.embedding_model

    def cache_key(self) -> str:
        tok, emb = source_key(self.tokenizer), source_key(self.embedding_model)  # a local one by content, not path
        return f"{self.CACHE_ID}:{self.name}:tokenizer={tok}:embeddings={emb}"

    def describe(self) -> str:
        emb = self.embedding_model or "none (semantic init and set_bias unavailable)"
        return f"vocab={self.name}: tokenizer {self.tokenizer}, target embeddings from {emb}"


# -- a vocabulary built once into the cache ----------------------------------------------------------------------------
class CachedTokenizerVocab(TargetVocab):
    """A tokenizer built from its `_params()` into $VTLAB_CACHE/vocab/<name>-<hash> (with a vtlab_vocab.json record),
    reused while intact, rebuilt when damaged. Subclasses give `_params()` and `_write(tmp)`; `REBUILD` names the
    rebuild in messages ("retrain" for a trained vocabulary)."""

    REBUILD: ClassVar[str] = "rebuild"

    def _params(self) -> dict[str, object]:
        raise NotImplementedError

    def _write(self, tmp: Path) -> None:
        """Build the tokenizer into the temp dir `tmp` (renamed into place by integrity.build)."""
        raise NotImplementedError

    def cache_key(self) -> str:
        return f"{self.name}-{json_hash(self._params(), length=12)}"

    def cache_path(self) -> Path:
        return cache_dir("vocab") / self.cache_key()

    def materialize(self) -> Path:
        """Build into the cache unless already there (in a temp dir, then renamed: racing runs are safe)."""
        final = self.cache_path()
        damage = integrity.problem(final) if final.exists() else "absent"
        if damage is not None:
            if damage != "absent":
                log.warning(
                    "vocab=%s: cached tokenizer %s is not usable (%s): %sing it", self.name, final, damage, self.REBUILD
                )
            integrity.build(final, self._write)  # racing builds are safe: the first valid entry wins
        return final

    def load_tokenizer(self, source_tokenizer: PreTrainedTokenizerBase | None = None) -> PreTrainedTokenizerBase:
        from transformers import PreTrainedTokenizerFast

        path = self.materialize()
        try:
            return PreTrainedTokenizerFast.from_pretrained(str(path))
        except (OSError, ValueError) as e:
            raise AssetError(
                f"vocab={self.name}: cached tokenizer {path} is unreadable ({e}); delete it to {self.REBUILD}"
            )


# -- a WordPiece trained on a corpus -----------------------------------------------------------------------------------
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # ids 0..4
MIN_VOCAB, MAX_VOCAB = 1000, 200_000
_RECIPE = "wordpiece-v2"  # bump when the training recipe changes, so old caches are not reused (v2: deterministic)


def _corpus_id(corpus: Callable[[], Iterable[str]] | Iterable[str]) -> str:
    """Stable identity of a corpus: a corpus object (vtlab.data.corpora.TextCorpus) by its `fixed_id`, else by its
    texts; a function (a config's `_target_`) by its qualified name, a partial of one (`_partial_: true`) by that and
    its arguments (vtlab.core.cache_keys), texts by their hash (a user's files too: the same texts give the same
    vocabulary wherever they live, and an edited file a new one)."""
    if hasattr(corpus, "fixed_id"):
        return corpus.fixed_id or _corpus_id(list(corpus()))
    if callable(corpus):
        if isinstance(corpus, functools.partial) and not (corpus.args or corpus.keywords):
            corpus = corpus.func  # a bare partial equals its function
        data = key_data(corpus, "vocab.corpus")
        return data if isinstance(data, str) else json.dumps(data, sort_keys=True)
    chunks = (text.encode("utf-8") + b"\0" for text in corpus)  # each text ended by a NUL, hashed as it streams by
    return f"texts:{stable_hash(chunks, length=40)}"  # the whole sha1


class CorpusWordPiece(CachedTokenizerVocab):
    """A BERT-style WordPiece vocabulary trained on a corpus (conf/vocab/corpus-wordpiece.yaml: the user's texts, or
    BoolQ's clean training passages), cached once trained.

    No pretrained model has embeddings in such a vocabulary, so `embedding_source()` is None: initializations that
    need target-space similarities (semantic init) or a target MLM bias (set_bias) cannot be used with it.
    """

    REBUILD = "retrain"

    def __init__(
        self,
        name: str,
        vocab_size: int = 20000,
        corpus: Callable[[], Iterable[str]] | Iterable[str] | None = None,
        lowercase: bool = True,
        strip_accents: bool = True,
        min_frequency: int = 5,
        preprocess: Preprocess | None = None,
    ) -> None:
        super().__init__(name, preprocess)
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or not MIN_VOCAB <= vocab_size <= MAX_VOCAB:
            raise VocabConfigError(f"vocab.vocab_size={vocab_size!r} must be an integer in [{MIN_VOCAB}, {MAX_VOCAB}]")
        if min_frequency < 1:
            raise VocabConfigError(f"vocab.min_frequency={min_frequency!r} must be >= 1")
        if corpus is None:
            raise VocabConfigError("vocab.corpus is null: expected the texts to train the WordPiece on (a corpus node)")
        if not callable(corpus) and not isinstance(corpus, (list, tuple)):
            corpus = list(corpus)  # a one-shot iterator would be consumed by hashing before training
        self.vocab_size = vocab_size
        self.corpus = corpus
        self.lowercase = bool(lowercase)
        self.strip_accents = bool(strip_accents)
        self.min_frequency = int(min_frequency)

    def _params(self) -> dict[str, object]:
        import tokenizers

        return {
            "recipe": _RECIPE,
            "tokenizers": tokenizers.__version__,
            "vocab_size": self.vocab_size,
            "corpus": _corpus_id(self.corpus),
            "lowercase": self.lowercase,
            "strip_accents": self.strip_accents,
            "min_frequency": self.min_frequency,
        }

    def _texts(self) -> Iterable[str]:
        texts = self.corpus() if callable(self.corpus) else self.corpus
        return (t for t in texts if isinstance(t, str) and t.strip())

    def _train(self) -> PreTrainedTokenizerBase:
        from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers
        from tokenizers.models import WordPiece
        from tokenizers.processors import TemplateProcessing
        from tokenizers.trainers import WordPieceTrainer
        from transformers import PreTrainedTokenizerFast

        def tokenizer(vocab: dict[str, int] | None = None) -> Tokenizer:
            tk = Tokenizer(
                WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##", max_input_chars_per_word=100)
            )
            tk.normalizer = normalizers.BertNormalizer(
                clean_text=True, handle_chinese_chars=True, strip_accents=self.strip_accents, lowercase=self.lowercase
            )
            tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
            tk.decoder = decoders.WordPiece(prefix="##")
            return tk

        tk = tokenizer()
        # Determinism: the trainer numbers the "##c" tokens (c: a character seen inside a word) in the order it walks a
        # hash map, which differs per process, and breaks ties between equally frequent merges by token id: two builds
        # gave other ids and a few other tokens. Passing the alphabet (in the trainer's own code-point order) and then
        # the "##c", sorted, as special tokens fixes all their ids, so every merge is chosen the same way (the same
        # tokens as the unpinned recipe up to its tie-breaking: 3 of 20,000 differ on BoolQ); the tokenizer is then
        # rebuilt with only SPECIALS as special tokens.
        words = {
            word
            for text in self._texts()
            for word, _ in tk.pre_tokenizer.pre_tokenize_str(tk.normalizer.normalize_str(text))
        }
        pinned = sorted({c for w in words for c in w}) + [f"##{c}" for c in sorted({c for w in words for c in w[1:]})]
        trainer = WordPieceTrainer(
            vocab_size=self.vocab_size,
            min_frequency=self.min_frequency,
            special_tokens=[*SPECIALS, *pinned],
            continuing_subword_prefix="##",
            show_progress=False,
        )
        tk.train_from_iterator(self._texts(), trainer=trainer)
        if tk.get_vocab_size() <= len(SPECIALS) + len(pinned):
            raise VtlabError(f"vocab={self.name}: the corpus {self._corpus_name()} gave no tokens (is it empty?)")
        tk = tokenizer(tk.get_vocab(with_added_tokens=True))
        tk.add_special_tokens(list(SPECIALS))
        if tk.get_vocab_size() < self.vocab_size:
            log.warning(
                "vocab=%s: the corpus %s only supports %d of vocab.vocab_size=%d tokens (min_frequency %d): the "
                "vocabulary is that smaller one; give a larger corpus (vocab.corpus.path) or set vocab.vocab_size=%d "
                "so that the run's config says what it trained",
                self.name,
                self._corpus_name(),
                tk.get_vocab_size(),
                self.vocab_size,
                self.min_frequency,
                tk.get_vocab_size(),
            )
        cls_id, sep_id = tk.token_to_id("[CLS]"), tk.token_to_id("[SEP]")
        tk.post_processor = TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
        )
        return PreTrainedTokenizerFast(
            tokenizer_object=tk,
            pad_token="[PAD]",
            unk_token="[UNK]",
            cls_token="[CLS]",
            sep_token="[SEP]",
            mask_token="[MASK]",
            model_max_length=512,
        )

    def _write(self, tmp: Path) -> None:
        log.info(
            "vocab=%s: training a %d-token WordPiece on %s -> %s",
            self.name,
            self.vocab_size,
            self._corpus_name(),
            self.cache_path(),
        )
        self._train().save_pretrained(tmp)
        (tmp / "vtlab_vocab.json").write_text(json.dumps(self._params(), indent=1, sort_keys=True))

    def _corpus_name(self) -> str:
        describe = getattr(self.corpus, "describe", None)
        return describe() if callable(describe) else _corpus_id(self.corpus)

    def describe(self) -> str:
        return (
            f"vocab={self.name}: {self.vocab_size}-token WordPiece trained on {self._corpus_name()} "
            f"(lowercase={self.lowercase}, strip_accents={self.strip_accents}); no pretrained model has embeddings "
            f"in this vocabulary, so semantic init / set_bias are unavailable: use an init that needs only the "
            f"source model (e.g. sub-token mean or random)"
        )
