"""vocab=lowercase-masked (vtlab/vocab/masked_outputs.py): the masked set of the real OLMo BPE, the derived model built
and cached through cached_transfer, and the claim behind the -1e4 bias: an MLM step and a SPLADE step leave the masked
rows bit-identical and their activations 0, on tiny models of both families M_bpe can have (BERT, ModernBERT)."""

import functools
import json
from pathlib import Path

import pytest
import torch
from helpers import compose_config
from hydra.utils import instantiate
from transformers import BertConfig, BertForMaskedLM

from vtlab.backbones import Backbone, TinyModernBert
from vtlab.losses.infonce import InfoNCE
from vtlab.models.encoder import SpladeEncoder
from vtlab.models.mlm import MLMModule
from vtlab.models.splade import SpladeModule
from vtlab.regularizers.flops import Flops
from vtlab.vocab.init import Auto, Semantic, Subword
from vtlab.vocab.masked_outputs import MASKED_BIAS, RECIPE, CasedOutputsMasked, cased_ids
from vtlab.vocab.targets import NativeVocab, Normalizer, VocabConfigError
from vtlab.vocab.transfer import TransferOptions, cached_transfer, check_compatible, transferred_backbone

pytestmark = pytest.mark.usefixtures("fresh_cache")

TEXTS = [
    "The Eiffel Tower is in PARIS, France.",
    "McDonald's opened in Moscow in 1990; Café Pushkin did not.",
    "Is NASA's James Webb telescope in orbit?",
    "ÉCOLE Normale Supérieure and the iPhone",
]


def tiny_modernbert() -> Backbone:
    return TinyModernBert(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_modernbert().load_tokenizer()


@pytest.fixture(scope="module")
def masked(tokenizer) -> list[int]:
    return cased_ids(tokenizer)


@pytest.fixture(scope="module")
def bert_bpe(tmp_path_factory, tokenizer) -> Backbone:
    """M_bpe's family: a tiny BERT masked LM on the OLMo BPE (the testbed moves SPLADE-tiny, a BERT, onto it)."""
    out = tmp_path_factory.mktemp("bert-bpe")
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    BertForMaskedLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return Backbone(str(out))


def vocab() -> CasedOutputsMasked:
    return CasedOutputsMasked("lowercase-masked", Normalizer(lowercase=True, blank_prefix=True))


# ---- the masked set ---------------------------------------------------------------------------------------------


def test_masked_set_is_the_tokens_with_an_uppercase_letter_minus_specials(tokenizer, masked):
    # recomputed independently of vtlab.vocab.canonical: the tokenizer's own byte-level decoder (invalid UTF-8 → U+FFFD)
    decode = tokenizer.backend_tokenizer.decoder.decode
    specials = set(tokenizer.all_special_ids) | {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    added = {i: t.content for i, t in tokenizer.added_tokens_decoder.items()}

    def text(token: str, i: int) -> str:
        if i in added:
            return added[i]
        return decode([token])

    expected = {
        i
        for token, i in tokenizer.get_vocab().items()
        if i not in specials and any(c.isupper() for c in text(token, i))
    }
    assert set(masked) == expected and len(masked) == 13028  # of 50,368 ids
    known = tokenizer.get_vocab()  # (an unknown token would read as [UNK], a special: kept, vacuously)
    assert all(t in known for t in ("ĠThe", "ĠTHE", "The", "Ġthe", "the", "Ã", "âĢ", "|||IP_ADDRESS|||", "[unused0]"))
    ids = tokenizer.convert_tokens_to_ids
    assert ids("ĠThe") in expected and ids("ĠTHE") in expected and ids("The") in expected
    assert ids("Ġthe") not in expected and ids("the") not in expected
    assert not specials & expected  # [CLS], [SEP], [MASK], [PAD], [UNK], <|endoftext|>, <|padding|>
    assert ids("[CLS]") not in expected and ids("[MASK]") not in expected
    # pieces of a multi-byte character: "Ã" (byte 0xC3, whose Latin-1 stand-in is uppercase) and "âĢ" (E2 80)
    assert ids("Ã") not in expected and ids("âĢ") not in expected
    assert ids("|||IP_ADDRESS|||") in expected and ids("[unused0]") not in expected  # added tokens: literal text


def test_lowercased_input_never_holds_a_masked_token(tokenizer, masked):
    ids = tokenizer([vocab().preprocess(t) for t in TEXTS])["input_ids"]
    assert not set(masked) & {i for row in ids for i in row}
    raw = tokenizer(TEXTS)["input_ids"]
    assert set(masked) & {i for row in raw for i in row}  # while the cased text does


# ---- the derived model, through the transfer cache ---------------------------------------------------------------


def test_encoder_gives_no_weight_to_a_masked_id_and_keeps_every_other_weight(tokenizer, masked):
    source = tiny_modernbert()
    arm = transferred_backbone(source, vocab(), Auto(), TransferOptions())
    report = json.loads((Path(arm.name_or_path) / "transfer_report.json").read_text())
    assert report["masked_outputs"] == len(masked) and report["recipe"] == RECIPE and report["tied_input_rows"]
    assert {"overlap", "init", "seconds"} <= report.keys()  # what stage transfer prints
    model = arm.load_model()
    decoder = model.get_output_embeddings()
    assert (decoder.weight[masked] == 0).all() and (decoder.bias[masked] == MASKED_BIAS).all()
    encode = functools.partial(SpladeEncoder, tokenizer=tokenizer, preprocess=vocab().preprocess, precision="fp32")
    w = encode(model).encode(TEXTS, "doc", show_progress=False).toarray()
    before = encode(source.load_model()).encode(TEXTS, "doc", show_progress=False).toarray()
    keep = sorted(set(range(w.shape[1])) - set(masked))
    assert (w[:, masked] == 0).all() and (before[:, masked] > 0).any()  # the random source does use them
    assert abs(w[:, keep] - before[:, keep]).max() <= 1e-6 and (w[:, keep] > 0).any()


def test_cache_key_names_the_recipe_is_stable_and_ignores_init():
    key = vocab().cache_key()
    assert key == vocab().cache_key() and f"recipe={RECIPE}" in key
    assert key != NativeVocab("lowercase-masked", Normalizer(True, True)).cache_key()
    source = tiny_modernbert()
    first = cached_transfer(source, vocab(), Auto(), TransferOptions())
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    # init and transfer options do not touch the derived model: one cache entry for all of them
    again = cached_transfer(tiny_modernbert(), vocab(), Subword(), TransferOptions(bias="zeros", seed=3))
    assert again == first and (first / "model.safetensors").stat().st_mtime_ns == stamp
    check_compatible(vocab(), Semantic())  # no init runs, so none is refused
    assert first.name.startswith("lowercase-masked-")


def test_derivation_is_declared_on_the_class_not_found_by_attribute(monkeypatch):
    """cached_transfer derives a model exactly for a vocabulary whose class declares DERIVES_MODEL (its derive_model
    overriding TargetVocab's), keyed by _derived_key; a derive_model method alone does not make a vocabulary derive."""
    from vtlab.vocab import transfer
    from vtlab.vocab.targets import TargetVocab

    class Recording(CasedOutputsMasked):
        def derive_model(self, model, tokenizer):
            return {"derived": (model, tokenizer)}

    class Undeclared(Recording):  # has the method, does not declare it
        DERIVES_MODEL = False

    assert TargetVocab.DERIVES_MODEL is False and CasedOutputsMasked.DERIVES_MODEL is True
    assert NativeVocab.DERIVES_MODEL is False and not NativeVocab("native").transfers
    with pytest.raises(NotImplementedError, match="derives no model"):
        NativeVocab("native").derive_model(None, None)
    seen = []
    monkeypatch.setattr(transfer, "_cached_model", lambda out, backbone, vocab, make: seen.append((out, make)) or out)
    source = tiny_modernbert()
    cached_transfer(source, Recording("lowercase-masked"), Auto(), TransferOptions())
    out, make = seen[0]
    assert out.name == f"lowercase-masked-{transfer._derived_key(source, vocab())}"
    assert make("model", "source tokenizer", "target tokenizer") == {"derived": ("model", "source tokenizer")}
    cached_transfer(source, Undeclared("lowercase-masked"), Subword(), TransferOptions())
    assert seen[1][0].name.startswith(f"lowercase-masked-{Subword().name}-")  # the transfer path


def test_preprocess_must_lowercase():
    for bad in (None, Normalizer(lowercase=False, blank_prefix=True)):
        with pytest.raises(VocabConfigError, match="vocab.preprocess"):
            CasedOutputsMasked("lowercase-masked", bad)
    assert CasedOutputsMasked("x").preprocess == Normalizer(lowercase=True, blank_prefix=True)


# ---- the -1e4 claim: no loss moves the masked rows ---------------------------------------------------------------


@pytest.fixture(scope="module", params=["bert", "modernbert"])
def arm_model(request, bert_bpe):
    source = bert_bpe if request.param == "bert" else tiny_modernbert()
    return Backbone(str(cached_transfer(source, vocab(), Auto()))).load_model()


def masked_rows(model, masked):
    decoder = model.get_output_embeddings()
    return decoder.weight[masked].detach().clone(), decoder.bias[masked].detach().clone()


def step(module, loss):
    opt = module.configure_optimizers()
    opt.zero_grad()
    loss.backward()
    opt.step()


def mlm_batch(tokenizer, texts, mask_every=3):
    """Lowercased texts with every `mask_every`-th real token [MASK]ed (the collator's main corruption)."""
    enc = tokenizer([vocab().preprocess(t) for t in texts], padding=True, return_tensors="pt")
    labels = torch.full_like(enc["input_ids"], -100)
    pick = (torch.arange(enc["input_ids"].shape[1]) % mask_every == 1) & (enc["attention_mask"] == 1)
    labels[pick] = enc["input_ids"][pick]
    enc["input_ids"] = enc["input_ids"].masked_fill(pick, tokenizer.mask_token_id)
    return {**enc, "labels": labels}


def test_mlm_step_leaves_masked_rows_bit_identical(arm_model, tokenizer, masked):
    model = arm_model
    weight, bias = masked_rows(model, masked)
    others = model.get_output_embeddings().weight.detach().clone()
    module = MLMModule(model, functools.partial(torch.optim.AdamW, lr=1e-2), weight_decay=0.01)
    module.train()
    batch = mlm_batch(tokenizer, TEXTS)
    with torch.no_grad():  # the softmax gives the masked rows exactly 0: so no gradient reaches them
        logits, _ = module.mlm_logits(batch)
        assert (torch.softmax(logits.float(), -1)[:, masked] == 0).all()
    step(module, module.training_step(batch, 0))
    after_w, after_b = masked_rows(model, masked)
    assert torch.equal(after_w, weight) and torch.equal(after_b, bias)
    assert not torch.equal(model.get_output_embeddings().weight.detach(), others)  # the step moved the other rows


def test_splade_step_leaves_masked_rows_bit_identical_and_inactive(arm_model, tokenizer, masked):
    model = arm_model
    weight, bias = masked_rows(model, masked)
    encoder = SpladeEncoder(model, tokenizer, preprocess=vocab().preprocess)
    module = SpladeModule(
        encoder,
        InfoNCE(),
        functools.partial(torch.optim.AdamW, lr=1e-2),
        query_regularizer=Flops(1e-2),
        doc_regularizer=Flops(1e-2),
        weight_decay=0.01,
    )
    module.train()
    queries, docs = TEXTS[:2], TEXTS  # each query: its positive and one negative
    batch = {"query": encoder.tokenize(queries, "query"), "docs": encoder.tokenize(docs, "doc")}
    step(module, module.training_step(batch, 0))
    q, d = module.last_batch["q"], module.last_batch["d"]
    assert (q[:, masked] == 0).all() and (d[:, masked] == 0).all() and (d > 0).any()
    after_w, after_b = masked_rows(model, masked)
    assert torch.equal(after_w, weight) and torch.equal(after_b, bias)


def test_a_masked_id_fed_as_mlm_noise_stays_dead(arm_model, tokenizer, masked):
    """The collator's random replacement can feed a masked id as input; the tied row may then move, but the bias
    stays bit-identical and the term can neither win probability nor activate."""
    model = arm_model
    _, bias = masked_rows(model, masked)
    module = MLMModule(model, functools.partial(torch.optim.AdamW, lr=1e-2), weight_decay=0.01)
    module.train()
    batch = mlm_batch(tokenizer, TEXTS)
    batch["input_ids"][:, 2] = torch.tensor(masked[: len(TEXTS)])  # unmasked positions: noise inputs
    for i in range(3):
        step(module, module.training_step(batch, i))
    assert torch.equal(masked_rows(model, masked)[1], bias)
    model.eval()
    encoder = SpladeEncoder(model, tokenizer, preprocess=vocab().preprocess, precision="fp32")  # no auto probe
    w = encoder.encode(TEXTS, "doc", show_progress=False)
    assert not w.toarray()[:, masked].any()
    logits = torch.nn.functional.linear(
        torch.randn(8, model.config.hidden_size) * 10,
        *(p.detach() for p in (model.get_output_embeddings().weight, model.get_output_embeddings().bias)),
    )
    assert (logits[:, masked] < MASKED_BIAS / 2).all()


# ---- config -----------------------------------------------------------------------------------------------------


def test_config_composes_onto_the_testbed_bpe_row():
    cfg = compose_config(
        ["experiment=testbed/main/bpe-native", "vocab=lowercase-masked", "stage=finetune", "paths.run_dir=/tmp/x"]
    )
    arm = instantiate(cfg.vocab)
    assert isinstance(arm, CasedOutputsMasked) and arm.name == "lowercase-masked" and arm.transfers
    assert instantiate(cfg.model.encoder.preprocess) == Normalizer(lowercase=True, blank_prefix=True)
    row = compose_config(["experiment=testbed/main/bpe-lowercase-masked", "paths.run_dir=/tmp/x"])
    assert row.vocab == cfg.vocab and row.backbone.name == "testbed-bpe"
