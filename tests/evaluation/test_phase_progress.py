"""Progress of long phases off a terminal (vtlab.core.progress): the lines of a fake clock's phase against hand-worked
counts, shares and times left, at most one line per interval; and the lines a real encoder, index and search log
while a small collection is evaluated."""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Iterator

import numpy as np
import pytest
import scipy.sparse as sp
from tqdm.auto import tqdm

from vtlab.backbones import Backbone
from vtlab.core import progress as progress_module
from vtlab.core.errors import VtlabError
from vtlab.core.progress import INTERVAL_ENV, LogLines, counted, duration, interval_s, progress
from vtlab.core.waiting import Waiting
from vtlab.data.collections import Collection
from vtlab.evaluation import evaluate
from vtlab.index import InvertedIndex
from vtlab.models.encoder import SpladeEncoder
from vtlab.runtime import precision as prec


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _messages(caplog, prefix: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "vtlab" and r.getMessage().startswith(prefix)]


def test_lines_give_counts_share_elapsed_and_time_left(caplog):
    clock = Clock()
    with caplog.at_level(logging.INFO, logger="vtlab"):
        with LogLines(4000, "passages", "encoding corpus", every=30, clock=clock) as bar:
            clock.now += 60
            bar.update(1000)  # 1,000 in 60 s: 3,000 left at the same rate is 180 s
            clock.now += 70
            bar.update(1200)  # 2,200 in 130 s: 1,800 left → 130 / 2200 * 1800 = 106.4 s
            clock.now += 3670
            bar.update(1800)  # the total: its line is the end's
    assert _messages(caplog, "encoding corpus") == [
        "encoding corpus: 1,000/4,000 passages (25%), 1m00s elapsed, ~3m00s left",
        "encoding corpus: 2,200/4,000 passages (55%), 2m10s elapsed, ~1m46s left",
        "encoding corpus: 4,000/4,000 passages (100%), 1h03m elapsed",
    ]


def test_at_most_one_line_per_interval_and_one_at_the_end(caplog):
    clock = Clock()
    logged_at = []
    with caplog.at_level(logging.INFO, logger="vtlab"):
        bar = LogLines(1000, "queries", "searching", every=30, clock=clock)
        for _ in range(100):  # one query every 0.7 s for 70 s
            clock.now += 0.7
            before = len(caplog.records)
            bar.update(10)
            if len(caplog.records) > before:
                logged_at.append(clock.now)
        bar.close()
        bar.close()  # once only
    lines = _messages(caplog, "searching")
    # 30 s after the start: 43 updates = 430 queries (30.1 s); 30 s later: 86 updates = 860 queries (60.2 s)
    assert lines == [
        "searching: 430/1,000 queries (43%), 30s elapsed, ~40s left",
        "searching: 860/1,000 queries (86%), 1m00s elapsed, ~10s left",
        "searching: 1,000/1,000 queries (100%), 1m10s elapsed",
    ]
    assert all(b - a >= 30 for a, b in zip(logged_at, logged_at[1:]))


def test_short_phase_failed_phase_and_unknown_total(caplog):
    clock = Clock()
    with caplog.at_level(logging.INFO, logger="vtlab"):
        with LogLines(50, "passages", "short", every=30, clock=clock) as bar:
            clock.now += 29
            bar.update(50)  # under one interval: no line at all
        with pytest.raises(RuntimeError), LogLines(50, "passages", "failed", every=0, clock=clock) as bar:
            clock.now += 1
            bar.update(20)
            raise RuntimeError("boom")  # the line at 20 is logged, no end line after it
        with LogLines(None, "passages", "streamed", every=10, clock=clock) as bar:
            clock.now += 12
            bar.update(256)
            clock.now += 3
            bar.update(100)
    assert _messages(caplog, "short") == []
    assert _messages(caplog, "failed") == ["failed: 20/50 passages (40%), 1s elapsed, ~2s left"]
    assert _messages(caplog, "streamed") == [
        "streamed: 256 passages, 12s elapsed",
        "streamed: 356 passages, 15s elapsed",
    ]


def test_interval_setting_and_durations(monkeypatch):
    monkeypatch.delenv(INTERVAL_ENV, raising=False)
    assert interval_s() == 30.0
    monkeypatch.setenv(INTERVAL_ENV, "0")
    assert interval_s() == 0.0
    for bad in ("-1", "soon", "nan", "inf"):
        monkeypatch.setenv(INTERVAL_ENV, bad)
        with pytest.raises(VtlabError, match=INTERVAL_ENV):
            interval_s()
    assert [duration(s) for s in (7, 59.6, 290, 3599, 3720)] == ["7s", "1m00s", "4m50s", "59m59s", "1h02m"]


@pytest.mark.parametrize("terminal", [True, False])
def test_a_bar_on_a_terminal_lines_off_it(monkeypatch, terminal):
    monkeypatch.setattr(progress_module, "interactive", lambda: terminal)
    shown = progress(10, "passages", "encoding corpus")
    assert isinstance(shown, tqdm if terminal else LogLines)
    assert not isinstance(progress(10, "passages", "encoding corpus", show=False), LogLines)
    shown.close()


TEXTS = [
    "A sonnet is a poetic form of fourteen lines that originated in Italy.",
    "The Amazon River in South America is the largest river by discharge volume of water.",
    "Python is a high-level programming language whose design emphasizes code readability.",
    "In economics, inflation is a general increase in the prices of goods and services.",
    "The cat sat on the mat.",
    "Mount Everest is Earth's highest mountain above sea level.",
    "Photosynthesis converts light energy into chemical energy in plants.",
    "The piano is a keyboard instrument with hammers that strike strings.",
    "Jupiter is the largest planet in the Solar System.",
    "A haiku has three lines of five, seven and five syllables.",
]


def small_collection() -> Collection:
    corpus = {f"d{i}": t for i, t in enumerate(TEXTS)}
    queries = {"q0": "poem of fourteen lines", "q1": "largest river", "q2": "biggest planet"}
    qrels = {"q0": {"d0": 1}, "q1": {"d1": 1}, "q2": {"d8": 1}}
    return Collection(name="small", corpus=corpus, queries=queries, qrels=qrels)


def test_evaluation_logs_encoding_indexing_and_search_progress(monkeypatch, caplog, shared_cache):
    monkeypatch.setattr(progress_module, "interactive", lambda: False)  # as under SLURM or a pipe
    monkeypatch.setenv(INTERVAL_ENV, "0")
    encoder = SpladeEncoder.from_backbone(Backbone("asset:splade-tiny"), doc_max_length=48, precision="fp32")
    searched = []

    def index(docs, doc_ids):
        idx = InvertedIndex(docs, doc_ids, backend="scipy")
        search = idx.search
        idx.search = lambda q, k, progress=None: searched.append(k) or search(q, k, batch_size=2, progress=progress)
        return idx

    with caplog.at_level(logging.INFO, logger="vtlab"):
        metrics = evaluate(encoder, small_collection(), batch_size=4, index=index)
    # 10 passages in batches of 4: a line after 4 and 8, the end line at 10; 3 queries in one batch
    assert [line.split(", ")[0] for line in _messages(caplog, "encoding corpus")] == [
        "encoding corpus: 4/10 passages (40%)",
        "encoding corpus: 8/10 passages (80%)",
        "encoding corpus: 10/10 passages (100%)",
    ]
    assert [line.split(", ")[0] for line in _messages(caplog, "encoding queries")] == [
        "encoding queries: 3/3 queries (100%)"
    ]
    indexing = _messages(caplog, "indexing")  # it counts nothing while it runs: its start, then its time
    assert indexing[0] == "indexing 10 passages ..." and len(indexing) >= 2, indexing
    assert all(line.startswith("indexing 10 passages: ") and line.endswith(" elapsed") for line in indexing[1:])
    # the scipy search in slices of 2 queries: 2 of 3, then all
    assert [line.split(", ")[0] for line in _messages(caplog, "searching")] == [
        "searching: 2/3 queries (66%)",
        "searching: 3/3 queries (100%)",
    ]
    assert searched == [100] and metrics["R@100"] > 0
    # a sparse model: no warning about its vectors
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "active" in r.getMessage()]


def test_search_progress_counts_every_query_on_both_backends():
    rng = np.random.default_rng(0)
    docs = sp.random(300, 50, density=0.2, format="csr", random_state=rng, dtype=np.float32)
    queries = sp.random(45, 50, density=0.2, format="csr", random_state=rng, dtype=np.float32)
    for backend in ("scipy", "native"):
        try:
            idx = InvertedIndex(docs, backend=backend)
        except RuntimeError:
            continue  # no C compiler: scipy only
        for threads in (1, 2):
            counts: list[int] = []
            scores, indices = idx.search(queries, k=5, batch_size=4, n_threads=threads, progress=counts.append)
            assert sum(counts) == 45 and len(counts) > 1
            ref_scores, ref_indices = idx.search(queries, k=5, batch_size=4, n_threads=threads)
            assert np.array_equal(indices, ref_indices) and np.array_equal(scores, ref_scores)


def test_counted_counts_each_item_once_the_caller_is_done_with_it(monkeypatch, caplog):
    monkeypatch.setattr(progress_module, "interactive", lambda: False)
    monkeypatch.setenv(INTERVAL_ENV, "0")
    with caplog.at_level(logging.INFO, logger="vtlab"):
        seen = list(counted([[1, 2], [3, 4], [5]], 5, "rows", "reading", size=len))
    assert seen == [[1, 2], [3, 4], [5]]
    assert [m.split(", ")[0] for m in _messages(caplog, "reading")] == [
        "reading: 2/5 rows (40%)",
        "reading: 4/5 rows (80%)",
        "reading: 5/5 rows (100%)",
    ]


@contextlib.contextmanager
def _ticked(label: str) -> Iterator[threading.Event]:
    """An event set once a line `<label>: ... elapsed` is logged (from the Waiting's own thread)."""
    ticked = threading.Event()

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith(f"{label}: ") and record.getMessage().endswith(" elapsed"):
                ticked.set()

    handler = Watch()
    logging.getLogger("vtlab").addHandler(handler)
    try:
        yield ticked
    finally:
        logging.getLogger("vtlab").removeHandler(handler)


def test_a_phase_that_counts_nothing_logs_its_time_while_it_runs(monkeypatch, caplog):
    """The phase (here: waiting for its own line) blocks; the lines come from Waiting's thread meanwhile."""
    monkeypatch.setattr(progress_module, "interactive", lambda: False)
    with caplog.at_level(logging.INFO, logger="vtlab"), _ticked("building") as ticked:
        with Waiting("building", every=0):
            assert ticked.wait(120)  # a line came while the phase had not ended
    lines = _messages(caplog, "building")
    assert lines[0] == "building ..." and all(re.fullmatch(r"building: \d+s elapsed", m) for m in lines[1:])


def test_a_phase_that_counts_nothing_shows_its_clock_on_a_terminal(monkeypatch, capsys):
    monkeypatch.setattr(progress_module, "interactive", lambda: True)
    with Waiting("building"):
        pass
    assert "building: 00:00" in capsys.readouterr().err


def test_the_precision_check_logs_its_time_while_it_times(monkeypatch, caplog):
    """precision=auto's timing (minutes for a large model on a slow CPU) is a Waiting: a line while `measure` runs."""
    monkeypatch.setattr(progress_module, "interactive", lambda: False)
    monkeypatch.setenv(INTERVAL_ENV, "0")
    with caplog.at_level(logging.INFO, logger="vtlab"), _ticked("choosing precision") as ticked:

        def measure(p: str) -> prec.Trial:
            assert ticked.wait(120)
            return prec.Trial(p, 100.0, None if p == "fp32" else prec.Agreement(0.999, 0.99))

        prec.choose_auto(("int8", "fp32"), measure, None, flags=frozenset())
    assert ticked.is_set() and "choosing precision ..." not in _messages(caplog, "choosing precision")
