"""A dev split cut from what an evaluation sample leaves over (vtlab.data.splits.held_out) holds no near-copy of an
evaluation text: planted near-copies of the sample's passages and questions, under ids of their own, do not come out,
nor do the questions judged on such a passage; texts that only share a topic or a phrase with the sample stay."""

from vtlab.data.collections import Collection
from vtlab.data.near_duplicates import near_duplicate_pairs
from vtlab.data.overlap import normalize
from vtlab.data.splits import held_out

THYROID = (
    "The thyroid hormone triiodothyronine acts on the heart muscle by binding nuclear receptors that regulate genes "
    "for contractile proteins and calcium handling, and its deficiency after myocardial infarction is associated "
    "with adverse cardiac remodeling in adult patients."
)
PREECLAMPSIA = (
    "Low dose aspirin taken from the first trimester reduces the risk of preterm preeclampsia in women at high risk "
    "according to a large randomized trial."
)
ASPIRIN = (
    "Aspirin is widely used for the prevention of cardiovascular events in older adults. "
    + PREECLAMPSIA
    + " Further trials are needed to define the optimal dose and timing during the second and third trimesters."
)
THYROID_QUESTION = "What does the thyroid hormone do to cardiac remodeling in adults?"
ASPIRIN_QUESTION = "Is aspirin safe during pregnancy?"

EVALUATION = Collection(
    "toy",
    corpus={"e1": THYROID, "e2": ASPIRIN},
    queries={"eq1": THYROID_QUESTION, "eq2": ASPIRIN_QUESTION},
    qrels={"eq1": {"e1": 1}, "eq2": {"e2": 1}},
)

PLANTED = {
    # (a) an evaluation passage with one word changed
    "a": THYROID.replace("regulate", "control"),
    # (b) a sentence of a longer evaluation passage
    "b": PREECLAMPSIA,
    # (d) unrelated
    "d": "The Danube flows through Vienna, Bratislava, Budapest and Belgrade before it reaches the Black Sea.",
    # (e) one phrase of an evaluation passage, then a passage of its own
    "e": "The thyroid hormone triiodothyronine acts on the heart muscle, but in this study we measured its serum "
    "levels in forty healthy volunteers over six months of endurance training and found no change at all.",
}
PLANTED_QUESTIONS = {
    "qa": "Which receptors does triiodothyronine bind in the heart?",
    "qb": "Does aspirin prevent preterm preeclampsia?",
    # (c) an evaluation question up to spacing, case and punctuation
    "qc": "what does the thyroid  Hormone do to cardiac remodeling in adults ?",
    "qd": "Which capital cities does the Danube flow through?",
    "qe": "What does the thyroid hormone do to muscle strength in athletes?",  # the template of (c), another question
    "qx": "Is triiodothyronine low after a heart attack?",
}


def _full() -> Collection:
    """The set the evaluation sample was drawn from: the sample, plus the planted texts under ids of their own."""
    return Collection(
        "toy",
        corpus={**EVALUATION.corpus, **PLANTED},
        queries={**EVALUATION.queries, **PLANTED_QUESTIONS},
        qrels={
            **EVALUATION.qrels,
            "qa": {"a": 1},
            "qb": {"b": 1, "d": 1},  # judged on a kept passage too: still out
            "qc": {"d": 1},
            "qd": {"d": 1},
            "qe": {"e": 1},
            "qx": {"e1": 1},  # judged on an evaluation passage by its id
        },
    )


def test_planted_texts_are_near_copies_an_exact_comparison_misses():
    evaluation_texts = {normalize(t) for t in (*EVALUATION.corpus.values(), *EVALUATION.queries.values())}
    for text in (*PLANTED.values(), *PLANTED_QUESTIONS.values()):
        assert normalize(text) not in evaluation_texts, text
    # (b) is contained in the longer evaluation passage: a Jaccard over the two shingle sets stays under the threshold
    assert near_duplicate_pairs([PLANTED["b"]], [ASPIRIN], measure="jaccard") == []


def test_held_out_drops_near_copies_of_the_evaluation_sample_and_the_questions_judged_on_them():
    dev = held_out(_full(), EVALUATION)
    assert set(dev.corpus) == {"d", "e"}
    assert set(dev.queries) == {"qd", "qe"}
    assert dev.corpus == {d: PLANTED[d] for d in ("d", "e")}
    assert dev.qrels == {"qd": {"d": 1}, "qe": {"e": 1}}
    assert {k: dev.source[k] for k in dev.source if k != "held_out_from"} == {
        "excluded_queries": 2,
        "excluded_docs": 2,
        "near_copy_docs": 2,  # a, b
        "near_copy_queries": 1,  # qc
        "queries_on_excluded_docs": 1,  # qx
        "queries_on_near_copy_docs": 2,  # qa, qb
    }


def test_a_set_without_near_copies_loses_only_the_exact_ids():
    full = _full()
    for planted in ("a", "b"):
        del full.corpus[planted]
    del full.queries["qc"], full.qrels["qc"]
    full.qrels["qa"], full.qrels["qb"] = {"d": 1}, {"d": 1}
    dev = held_out(full, EVALUATION)
    assert set(dev.corpus) == {"d", "e"}
    assert set(dev.queries) == {"qa", "qb", "qd", "qe"}
    assert dev.source["near_copy_docs"] == dev.source["near_copy_queries"] == 0
