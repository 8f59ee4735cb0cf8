"""Initializers for the input-embedding rows of a model moved onto a new vocabulary (Vocabulary Transfer).

Every initializer maps (source embeddings, token overlap) → a [V_target, H] matrix. All of them except
`AllRandom` copy the overlap rows (`E_new[target_ids] = E_src[source_ids]`) and differ only in how the
remaining "new" target rows are filled:

* `Semantic`  FOCUS-style: sparsemax over similarities measured in the TARGET model's own embedding space,
              applied as weights over the SOURCE rows of the overlap tokens (the VT paper's default).
* `Mean`      the mean of the overlap source rows.
* `Subword`   FVT: the mean of the source rows of the pieces the source tokenizer makes of the token's text.
* `NewRandom` N(0, initializer_range).
* `AllRandom` every row N(0, initializer_range), nothing copied (the ablation floor).

Each returns `(matrix, stats)`; stats count the rows filled by each rule and are JSON-serializable.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, get_args

import numpy as np
import torch
from torch import Tensor

from vtlab.core.choices import Similarity
from vtlab.core.errors import VtlabError
from vtlab.vocab.canonical import (
    BYTES_MARK,
    WORD_START,
    Overlap,
    added_token_form,
    canonical_form,
    special_ids,
    tokenizer_kind,
)
from vtlab.vocab.similarity import Similarities, pmi_transform, sparsemax, weighted_rows, zscore_transform

log = logging.getLogger(__name__)

_RESCALE_EPS = 1e-8


def _stats(**counts: int) -> dict[str, Any]:
    base = {"copied": 0, "semantic": 0, "subword": 0, "mean": 0, "mean_fallback": 0, "random": 0}
    base.update(counts)
    return base


@dataclass
class Initializer:
    """Base class: validates inputs, copies the overlap rows, and asks `_fill` for the new rows.

    A subclass is a @dataclass of its own: its fields are its settings, which key the cache of transferred models
    (vtlab.core.cache_keys); a field that does not change the rows is named in `KEY_NEUTRAL`."""

    needs_target_embeddings: ClassVar[bool] = False
    # whether the rows depend on the transfer's random generator (transfer.seed): only then is the seed part of the
    # transferred model's cache key, so a deterministic init is built once for every run seed
    draws: ClassVar[bool] = False
    name: str = field(default="init", kw_only=True)

    def __call__(
        self,
        source_embeddings: Tensor,
        overlap: Overlap,
        *,
        target_size: int,
        source_tokenizer: Any = None,
        target_tokenizer: Any = None,
        target_embeddings: Tensor | None = None,
        initializer_range: float = 0.02,
        generator: torch.Generator | None = None,
    ) -> tuple[Tensor, dict[str, Any]]:
        src = source_embeddings.detach().float()
        tgt_ids, src_ids = _overlap_ids(overlap, target_size, src.shape[0])
        new_ids = np.setdiff1d(np.arange(target_size, dtype=np.int64), tgt_ids)  # sorted, unique
        out = torch.empty(target_size, src.shape[1], dtype=torch.float32)
        out[torch.from_numpy(tgt_ids)] = src[torch.from_numpy(src_ids)]
        if len(new_ids) == 0:
            return out, _stats(copied=len(np.unique(tgt_ids)))
        rows, stats = self._fill(
            src,
            tgt_ids,
            src_ids,
            new_ids,
            source_tokenizer=source_tokenizer,
            target_tokenizer=target_tokenizer,
            target_embeddings=target_embeddings,
            initializer_range=initializer_range,
            generator=generator,
        )
        out[torch.from_numpy(new_ids)] = rows
        stats["copied"] = len(np.unique(tgt_ids))
        return out, stats

    def _fill(
        self, src: Tensor, tgt_ids: np.ndarray, src_ids: np.ndarray, new_ids: np.ndarray, **ctx: Any
    ) -> tuple[Tensor, dict[str, Any]]:
        """Rows for `new_ids` (in that order) and the stats."""
        raise NotImplementedError


def _overlap_ids(overlap: Overlap, target_size: int, source_size: int) -> tuple[np.ndarray, np.ndarray]:
    tgt = np.asarray(overlap.target_ids, dtype=np.int64).reshape(-1)
    src = np.asarray(overlap.source_ids, dtype=np.int64).reshape(-1)
    if tgt.shape != src.shape:
        raise VtlabError(f"overlap has {len(tgt)} target ids but {len(src)} source ids")
    if len(tgt) and (tgt.min() < 0 or tgt.max() >= target_size):
        raise VtlabError(f"overlap target id out of range [0, {target_size})")
    if len(src) and (src.min() < 0 or src.max() >= source_size):
        raise VtlabError(
            f"overlap source id out of range [0, {source_size}): the source model has {source_size} embedding rows"
        )
    return tgt, src


def _overlap_mean(src: Tensor, src_ids: np.ndarray) -> Tensor:
    # With no overlap at all the mean of every source row is the closest stand-in.
    if len(src_ids) == 0:
        return src.mean(dim=0)
    return src[torch.from_numpy(src_ids)].mean(dim=0)


def _normal(n: int, h: int, std: float, generator: torch.Generator | None) -> Tensor:
    return torch.randn(n, h, generator=generator, dtype=torch.float32) * std


@dataclass
class Mean(Initializer):
    """New rows = the mean of the overlap source rows (`--use_mean`)."""

    name: str = field(default="mean", kw_only=True)

    def _fill(self, src, tgt_ids, src_ids, new_ids, **ctx):
        mean = _overlap_mean(src, src_ids)
        return mean.expand(len(new_ids), -1).clone(), _stats(mean=len(new_ids))


@dataclass
class NewRandom(Initializer):
    """New rows ~ N(0, initializer_range) (`--new_random`)."""

    draws: ClassVar[bool] = True

    name: str = field(default="new-random", kw_only=True)

    def _fill(self, src, tgt_ids, src_ids, new_ids, *, initializer_range, generator, **ctx):
        return _normal(len(new_ids), src.shape[1], initializer_range, generator), _stats(random=len(new_ids))


@dataclass
class AllRandom(Initializer):
    """Every row ~ N(0, initializer_range), the overlap included (`--all_random`): the ablation floor."""

    draws: ClassVar[bool] = True

    name: str = field(default="all-random", kw_only=True)

    def __call__(
        self,
        source_embeddings,
        overlap,
        *,
        target_size,
        source_tokenizer=None,
        target_tokenizer=None,
        target_embeddings=None,
        initializer_range=0.02,
        generator=None,
    ):
        out = _normal(target_size, source_embeddings.shape[1], initializer_range, generator)
        return out, _stats(random=target_size)


# ----------------------------------------------------------------------------------------------------------------
# Semantic (FOCUS-style in the target model's embedding space)


@dataclass
class Semantic(Initializer):
    """E_new[n] = Σ_o sparsemax(S[n, :])_o · E_src[o] over overlap tokens o, S measured on TARGET embeddings.

    similarity: "cosine" (or dot product with use_matmul), "pmi" (PPMI of the min-max-normalized whole matrix)
    or "zscore" (column z-score, each row divided by its max). Rows are processed `chunk_rows` at a time, so
    the N_new × |O| matrix is never held whole; pmi and zscore take a statistics pass first.
    """

    needs_target_embeddings: ClassVar[bool] = True
    name: str = field(default="semantic", kw_only=True)
    similarity: Similarity = "cosine"
    rescale_norm: bool = False
    use_matmul: bool = False
    chunk_rows: int = field(default=2048, repr=False)
    KEY_NEUTRAL: ClassVar[tuple[str, ...]] = ("chunk_rows",)  # memory only: results do not depend on it

    def __post_init__(self) -> None:
        if self.similarity not in (choices := get_args(Similarity)):
            expected = f"{', '.join(choices[:-1])} or {choices[-1]}"
            raise VtlabError(f"init.similarity={self.similarity!r}: expected {expected}")
        if self.chunk_rows < 1:
            raise VtlabError(f"init.chunk_rows={self.chunk_rows}: must be ≥ 1")
        if self.name == "semantic" and self.similarity != "cosine":
            # `init.similarity=pmi` on the command line: name the run like conf/init/semantic-pmi.yaml does.
            self.name = f"semantic-{self.similarity}"

    def _fill(self, src, tgt_ids, src_ids, new_ids, *, target_embeddings, **ctx):
        if target_embeddings is None:
            raise VtlabError(
                "init=semantic needs a target model with input embeddings (vocab.embedding_model); "
                "this vocabulary has none — use init=subword or init=mean"
            )
        if len(tgt_ids) == 0:
            raise VtlabError("init=semantic needs at least one token shared by the source and target vocabularies")
        T = target_embeddings.detach().float()
        if T.shape[0] <= max(int(tgt_ids.max()), int(new_ids.max())):
            raise VtlabError(
                f"target embeddings have {T.shape[0]} rows; the target vocabulary needs "
                f"{max(int(tgt_ids.max()), int(new_ids.max())) + 1}"
            )
        start = time.perf_counter()
        t_ov = T[torch.from_numpy(tgt_ids)]
        t_new = T[torch.from_numpy(new_ids)]
        e_ov = src[torch.from_numpy(src_ids)]
        # Degenerate target rows (zero norm: cosine undefined; non-finite) get the overlap mean and stay out of the
        # pmi / zscore statistics, which are over the well-defined rows only.
        ok = torch.isfinite(t_new).all(dim=1) & (t_new.norm(dim=1) > 0)
        if not self.use_matmul:
            t_ov = torch.nn.functional.normalize(t_ov, dim=1)
            t_new = torch.nn.functional.normalize(t_new, dim=1)
        t_good = t_new[ok]

        rows = _overlap_mean(src, src_ids).expand(len(new_ids), -1).clone()
        good_rows = torch.empty(t_good.shape[0], src.shape[1])
        sims = Similarities(t_good, t_ov, self.chunk_rows, passes=2 if self.similarity == "pmi" else 1)
        transform = self._score_transform(sims)
        ov_norms = e_ov.norm(dim=1) if self.rescale_norm else None
        support: list[Tensor] = []
        bad = torch.zeros(t_good.shape[0], dtype=torch.bool)
        for lo, chunk in sims:
            scores = transform(lo, chunk)
            del chunk
            # a NaN/inf score makes its row's sum non-finite: one reduction, no full-size mask
            finite = torch.isfinite(scores.sum(dim=1))
            scores[~finite] = 0.0  # replaced by the mean below; keeps sparsemax NaN-free
            w = sparsemax(scores)
            del scores
            row_support = torch.count_nonzero(w, dim=1)  # sparsemax weights are ≥ 0
            out = weighted_rows(w, e_ov, int(row_support.sum()))
            if ov_norms is not None:
                # The weighted average of unit-ish vectors shrinks; restore the norm the weights imply.
                expected = w @ ov_norms
                out *= (expected / (out.norm(dim=1) + _RESCALE_EPS)).unsqueeze(1)
            support.append(row_support)
            good_rows[lo : lo + len(out)] = out
            bad[lo : lo + len(out)] = ~finite
        idx = torch.nonzero(ok).squeeze(1)
        keep = ~bad
        rows[idx[keep]] = good_rows[keep]
        n_support = torch.cat(support)[keep].float() if support else torch.zeros(0)
        n_fallback = len(new_ids) - int(keep.sum())
        stats = _stats(semantic=int(keep.sum()), mean_fallback=n_fallback)
        stats.update(
            similarity=self.similarity,
            support_mean=float(n_support.mean()) if len(n_support) else 0.0,
            support_max=int(n_support.max()) if len(n_support) else 0,
            seconds=round(time.perf_counter() - start, 3),
        )
        if n_fallback:
            log.warning("init=semantic: %d new rows had degenerate similarities and got the overlap mean", n_fallback)
        return rows, stats

    def _score_transform(self, sims: Similarities):
        """A function (chunk start, raw similarity chunk) → scores (it may overwrite the chunk); pmi first scans the
        chunks for the global min and max."""
        if self.similarity == "cosine":
            return lambda lo, s: s
        if self.similarity == "pmi":
            return pmi_transform(sims)
        return zscore_transform(sims)


# ----------------------------------------------------------------------------------------------------------------
# Subword (FVT)


def token_surface(token: str, target_kind: str, source_kind: str, added: bool = False) -> str | None:
    """The text a target vocabulary entry stands for, spelled so the source tokenizer reproduces its word position.

    Uses the shared canonical form ("▁" + text when word-initial: WordPiece "apple", byte-level "Ġapple",
    SentencePiece "▁apple"; bare text for continuations "##ing" / "ing"), turning "▁" back into a leading space,
    which is what makes a byte-level or SentencePiece source pick its Ġ/▁ word-initial pieces. A WordPiece source
    splits on whitespace anyway, so it gets the bare text. None when the entry has no text of its own
    (a byte-level piece of a multi-byte character).
    """
    form = added_token_form(token) if added else canonical_form(token, target_kind)
    if form.startswith(BYTES_MARK):
        return None
    if form.startswith(WORD_START):
        return form[1:] if source_kind == "wordpiece" else " " + form[1:]
    return form


@dataclass
class Subword(Initializer):
    """FVT (`--use_sub`): a new row is the mean of the source rows of the source tokenizer's pieces of its text.

    Special tokens are never tokenized as text; they, tokens with no pieces, and tokens whose pieces are all
    unknown get the overlap mean. Unknown pieces among known ones are dropped.
    """

    name: str = field(default="subword", kw_only=True)

    def _fill(self, src, tgt_ids, src_ids, new_ids, *, source_tokenizer, target_tokenizer, **ctx):
        if source_tokenizer is None or target_tokenizer is None:
            raise VtlabError("init=subword needs the source and the target tokenizer")
        special = special_ids(target_tokenizer)
        added = {int(i) for i in target_tokenizer.added_tokens_decoder}
        t_kind, s_kind = tokenizer_kind(target_tokenizer), tokenizer_kind(source_tokenizer)
        tokens = target_tokenizer.convert_ids_to_tokens([int(i) for i in new_ids])
        # Pieces that are source special tokens (text like "<|endoftext|>" matched as a whole) are not content.
        drop = special_ids(source_tokenizer)
        texts: list[str] = []
        slots: list[int] = []
        n_special = 0
        for k, (tid, tok) in enumerate(zip(new_ids.tolist(), tokens)):
            if tid in special or tok is None:
                n_special += 1
                continue
            text = token_surface(tok, t_kind, s_kind, added=tid in added)
            if text:
                texts.append(text)
                slots.append(k)
        pieces = source_tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        v_src = src.shape[0]
        flat_rows: list[int] = []
        flat_ids: list[int] = []
        counts = torch.zeros(len(new_ids))
        for k, ids in zip(slots, pieces):
            ids = [i for i in ids if i not in drop and 0 <= i < v_src]  # drop ⊇ unk
            flat_rows.extend([k] * len(ids))
            flat_ids.extend(ids)
            counts[k] = len(ids)
        sums = torch.zeros(len(new_ids), src.shape[1])
        if flat_ids:
            sums.index_add_(0, torch.tensor(flat_rows), src[torch.tensor(flat_ids)])
        has = counts > 0
        rows = _overlap_mean(src, src_ids).expand(len(new_ids), -1).clone()
        rows[has] = sums[has] / counts[has].unsqueeze(1)
        n_sub = int(has.sum())
        stats = _stats(subword=n_sub, mean_fallback=len(new_ids) - n_sub)
        stats.update(special=n_special, pieces_mean=float(counts[has].mean()) if n_sub else 0.0)
        return rows, stats


@dataclass
class Auto(Initializer):
    """The default: `Semantic` when the target vocabulary has a model with input embeddings (e.g. bert-uncased),
    otherwise `Subword` (FVT) — e.g. a corpus-trained WordPiece, where no target embedding space exists.
    Choosing `init=semantic` explicitly on such a vocabulary is an error instead."""

    similarity: Similarity = "cosine"
    name: str = field(default="auto", kw_only=True)

    def __call__(
        self, source_embeddings: Tensor, overlap: Overlap, *, target_embeddings: Tensor | None = None, **kwargs: Any
    ) -> tuple[Tensor, dict[str, Any]]:
        chosen = Semantic(similarity=self.similarity) if target_embeddings is not None else Subword()
        rows, stats = chosen(source_embeddings, overlap, target_embeddings=target_embeddings, **kwargs)
        return rows, {**stats, "chosen": chosen.name}
