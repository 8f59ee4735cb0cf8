"""vtlab.diagnose.case: case-variant groups of real vocabularies, and the row cosine / mass figures on a tiny model."""

import pytest
import torch

from vtlab.backbones import Backbone, TinyModernBert
from vtlab.diagnose.case import case_groups, case_handling


@pytest.fixture(scope="module")
def tiny():
    b = TinyModernBert(hidden_size=32, num_hidden_layers=1, intermediate_size=64)
    return b.load_model(), b.load_tokenizer()


def test_groups_of_the_cased_olmo_bpe_and_none_in_uncased_wordpiece(tiny):
    _, tok = tiny
    groups = {tuple(tok.convert_ids_to_tokens(g)) for _, g in case_groups(tok)}
    the = next(g for g in groups if g[0] == "Ġthe")
    assert {"ĠThe", "ĠTHE"} <= set(the)
    assert not any("the" in g and "Ġthe" in g for g in groups), "word-initial and inner entries must not mix"
    assert case_groups(Backbone("asset:minilm").load_tokenizer()) == []


@pytest.mark.slow
def test_row_cosine_is_one_for_copied_rows_and_mass_counts_the_lighter_variants(tiny):
    model, tok = tiny
    texts = ["The cat sat on the mat.", "THE END of the story"]
    random_rows = case_handling(model, tok, texts)
    assert random_rows["row_cosine"] < 0.5  # independent random rows
    rows = model.get_output_embeddings().weight
    with torch.no_grad():
        for _, g in case_groups(tok):
            rows[g] = rows[g[0]].clone()  # every variant a copy of its lowercase entry (what FVT from uncased gives)
    copied = case_handling(model, tok, texts)
    assert copied["row_cosine"] == pytest.approx(1.0, abs=1e-5)
    # hand check of the mass share: recompute from the document weights
    from vtlab.diagnose.case import document_terms

    w = document_terms(model, tok, texts)
    groups = [g for _, g in case_groups(tok)]
    spread = sum(float((w[:, g].sum(1) - w[:, g].max(1).values).sum()) for g in groups)
    assert copied["doc_mass_on_variants"] == pytest.approx(spread / float(w.sum()))
    assert 0.0 < copied["doc_mass_on_variants"] < 1.0


@pytest.mark.slow
def test_fvt_from_uncased_starts_word_initial_case_variants_as_copies(tmp_path, monkeypatch):
    """The real M_bpe start (SPLADE-tiny moved onto the OLMo BPE by FVT, no MLM): "ĠThe" and "Ġthe" are one row, so
    the case gate's row cosine is exactly 1 there and only cased training can bring it below the gate's 0.99."""
    from helpers import compose_config
    from hydra.utils import instantiate

    from vtlab.reproduce.gates import MAX_CASE_ROW_COSINE

    monkeypatch.setenv("VTLAB_CACHE", str(tmp_path))
    start = instantiate(compose_config(["backbone=testbed-bpe"]).backbone.start)
    report = case_handling(start.load_model(), start.load_tokenizer(), ["The Apple and the apple.", "THE END"])
    assert report["row_cosine_groups"] > 1000
    assert report["row_cosine"] == pytest.approx(1.0, abs=1e-6) and report["row_cosine"] >= MAX_CASE_ROW_COSINE
    assert report["doc_mass_on_variants"] > 0.1  # the mass spreads over the copies: the redundancy VT removes
