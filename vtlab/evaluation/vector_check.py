"""A look at the first vectors of a corpus before the rest is encoded: vectors with most of the vocabulary active
(a model without a trained sparse head, such as e5-small as is) make encoding slow and retrieval meaningless, and
vectors with no active term retrieve nothing. Either way one warning line says so, with the figures and what to do,
before the long phase goes on."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

DENSE_SHARE = 0.5  # mean active terms per passage above this share of the vocabulary: dense vectors
EMPTY_SHARE = 0.5  # share of passages with no active term above this: empty vectors

log = logging.getLogger("vtlab")


def active_terms(sample: sp.spmatrix | sp.sparray) -> np.ndarray:
    """The number of non-zero weights of each row of `sample` (explicit zeros not counted)."""
    m = sp.csr_matrix(sample, copy=True)
    m.eliminate_zeros()
    return np.diff(m.indptr)


def vector_problem(sample: sp.spmatrix | sp.sparray) -> str | None:
    """What is wrong with the vectors of `sample` (passages × vocabulary), or None: "dense" when the mean number of
    active terms per passage is above DENSE_SHARE of the vocabulary, "empty" when more than EMPTY_SHARE of the
    passages have no active term."""
    n, vocab = sample.shape
    if n == 0 or vocab == 0:
        return None
    active = active_terms(sample)
    if active.mean() > DENSE_SHARE * vocab:
        return "dense"
    if np.count_nonzero(active == 0) > EMPTY_SHARE * n:
        return "empty"
    return None


def _dense(active: np.ndarray, vocab: int, n_total: int) -> str:
    mean = float(active.mean())
    return (
        f"the first {active.size:,} passages have {mean:,.0f} of {vocab:,} terms active on average "
        f"({100 * mean / vocab:.0f}%): the vectors are dense, so encoding {n_total:,} passages is slow and retrieval "
        "meaningless; train the head (stage=all) or calibrate the bias (apc=p60)"
    )


def _empty(active: np.ndarray, vocab: int, n_total: int) -> str:
    return (
        f"{int(np.count_nonzero(active == 0)):,} of the first {active.size:,} passages have no active term: the "
        f"vectors are empty, so retrieval over {n_total:,} passages finds nothing for them; check the checkpoint (a "
        "collapsed model: its training health log) or calibrate the bias (apc=p60)"
    )


_LINES = {"dense": _dense, "empty": _empty}


def vector_warning(sample: sp.spmatrix | sp.sparray, n_total: int, label: str) -> str | None:
    """The warning line for the vectors of `sample`, the first of `n_total` passages, or None when they look usable."""
    problem = vector_problem(sample)
    if problem is None:
        return None
    return f"{label}: {_LINES[problem](active_terms(sample), int(sample.shape[1]), n_total)}"


def warn_if_useless(sample: sp.spmatrix | sp.sparray, n_total: int, label: str) -> bool:
    """Log vector_warning's line, if any, as one warning; whether there was one."""
    line = vector_warning(sample, n_total, label)
    if line is not None:
        log.warning("%s", line)
    return line is not None


def model_label(encoder: Any) -> str:
    """A short name of the encoder's model for a log line: the last part of its `name_or_path` (with its parent
    when that part is only `model`), else the encoder's class."""
    name = str(getattr(getattr(encoder, "model", None), "name_or_path", "") or "")
    if not name:
        return type(encoder).__name__
    path = Path(name)
    return f"{path.parent.name}/{path.name}" if path.name == "model" and path.parent.name else path.name
