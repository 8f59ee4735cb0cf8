"""Vocabulary transfer applied to real and tiny models: identity, tying, reload, bias z-map, norm rescale, families."""

import json

import pytest
import torch
from torch import nn
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

from vtlab.backbones import Backbone, TinyModernBert, TinyRoberta
from vtlab.core.assets import asset_path
from vtlab.core.errors import VtlabError
from vtlab.models.encoder import SpladeEncoder
from vtlab.vocab.canonical import Overlap
from vtlab.vocab.init import AllRandom, Mean, NewRandom, Semantic, Subword
from vtlab.vocab.targets import CorpusWordPiece, PretrainedVocab
from vtlab.vocab.transfer import TransferOptions, apply_transfer, cached_transfer, target_norm_scale, zscore_map

pytestmark = pytest.mark.usefixtures("fresh_cache")


def bert_vocab() -> PretrainedVocab:
    return PretrainedVocab(name="bert-uncased", tokenizer="asset:minilm", embedding_model="asset:splade-tiny")


QUERIES = [
    "what causes acid rain",
    "is the capital of australia sydney",
    "does ethanol take more energy make that produces",
    "is house tax and property tax are same",
    "was the leaning tower of pisa built leaning",
    "Café déjà vu — naïve?",
]


# ---- hand-computed pieces ---------------------------------------------------------------------------------------


def test_zscore_map_hand_values():
    target = torch.tensor([1.0, 2.0, 3.0])  # mean 2, std 1 (unbiased)
    source = torch.tensor([10.0, 14.0])  # mean 12, std 2.828427
    expected = torch.tensor([12 - 2.828427, 12.0, 12 + 2.828427])
    assert torch.allclose(zscore_map(target, source), expected, atol=1e-5)
    with pytest.raises(VtlabError, match="transfer.bias"):
        zscore_map(torch.zeros(3), source)


def test_target_norm_scale_hand_values():
    target = torch.tensor([[3.0, 4.0], [0.0, 1.0], [9.0, 9.0]])  # overlap rows 0, 1: norms 5, 1 → mean 3
    new = torch.tensor([[0.0, 2.0], [1.0, 0.0], [5.0, 5.0]])  # overlap rows 0, 1: norms 2, 1 → mean 1.5
    ov = Overlap(
        target_ids=torch.tensor([0, 1]).numpy(),
        source_ids=torch.tensor([0, 1]).numpy(),
        n_exact=2,
        n_fuzzy=0,
        n_special=0,
        source_size=2,
        target_size=3,
    )
    assert target_norm_scale(target, new, ov) == pytest.approx(2.0)


# ---- identity: same vocabulary, every informed init reproduces the model exactly ------------------------------------


@pytest.mark.parametrize(
    "init",
    [Semantic(), Semantic(similarity="pmi"), Mean(), Subword(), NewRandom()],
    ids=["semantic", "semantic-pmi", "mean", "subword", "new-random"],
)
def test_identity_transfer_reproduces_splade_tiny(init):
    original = SpladeEncoder.from_backbone(Backbone("asset:splade-tiny"))
    path = cached_transfer(Backbone("asset:splade-tiny"), bert_vocab(), init)
    report = json.loads((path / "transfer_report.json").read_text())
    assert report["overlap"]["n_exact"] + report["overlap"]["n_special"] == 30522
    moved = SpladeEncoder.from_backbone(Backbone(str(path)))
    a = original.encode(QUERIES, "query", show_progress=False).toarray()
    b = moved.encode(QUERIES, "query", show_progress=False).toarray()
    assert ((a != 0) == (b != 0)).all()
    assert abs(a - b).max() <= 1e-5


def test_all_random_is_not_identity():
    path = cached_transfer(Backbone("asset:splade-tiny"), bert_vocab(), AllRandom())
    original = SpladeEncoder.from_backbone(Backbone("asset:splade-tiny"))
    moved = SpladeEncoder.from_backbone(Backbone(str(path)))
    assert (
        abs(
            original.encode(QUERIES, "query", show_progress=False).toarray()
            - moved.encode(QUERIES, "query", show_progress=False).toarray()
        ).max()
        > 0.1
    )


# ---- families: tiny random models with real tokenizers ----------------------------------------------------------


def _tiny_bert() -> tuple[nn.Module, object]:
    tok = AutoTokenizer.from_pretrained(str(asset_path("minilm")))
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    return BertForMaskedLM(cfg).eval(), tok


def _check_transferred(model, target_tok, texts=("Hello world, this is a Test.", "the cat sat")):
    dec = model.get_output_embeddings()
    assert dec.weight is model.get_input_embeddings().weight  # tied
    assert dec.weight.shape[0] == len(target_tok) == model.config.vocab_size
    assert model.config.pad_token_id == target_tok.pad_token_id
    enc = target_tok(list(texts), padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
    assert logits.shape[-1] == len(target_tok) and torch.isfinite(logits).all()


@pytest.mark.slow
def test_bert_to_olmo_bpe_and_back_reloads_identically(tmp_path):
    model, tok = _tiny_bert()
    olmo = TinyModernBert().load_tokenizer()
    target_emb = torch.randn(len(olmo), 16)
    report = apply_transfer(model, tok, olmo, Semantic(), target_emb, None, TransferOptions(bias="zeros"))
    assert report["overlap"]["n_exact"] > 10000 and report["init"]["name"] == "semantic"
    _check_transferred(model, olmo)
    model.save_pretrained(tmp_path)
    olmo.save_pretrained(tmp_path)
    reloaded = Backbone(str(tmp_path)).load_model()
    enc = olmo(["Hello world, this is a Test."], return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(model(**enc).logits, reloaded(**enc).logits)
    assert reloaded.get_output_embeddings().weight.data_ptr() == reloaded.get_input_embeddings().weight.data_ptr()


@pytest.mark.slow
def test_modernbert_to_bert_uncased():
    backbone = TinyModernBert()
    model, src = backbone.load_model(), backbone.load_tokenizer()
    tgt = AutoTokenizer.from_pretrained(str(asset_path("minilm")))
    target_emb = Backbone("asset:splade-tiny").load_model().get_input_embeddings().weight.detach()
    target_bias = Backbone("asset:splade-tiny").load_model().get_output_embeddings().bias.detach()
    report = apply_transfer(model, src, tgt, Semantic(similarity="pmi"), target_emb, target_bias, TransferOptions())
    _check_transferred(model, tgt)
    assert model.config.cls_token_id == tgt.cls_token_id and model.config.sep_token_id == tgt.sep_token_id
    # set_bias: the new bias has the source bias' mean/std (z-map), times the target-norm scale
    alpha = report["target_norm_scale"]
    bias = model.get_output_embeddings().bias.detach() / alpha
    assert report["bias"]["mode"] == "zmap"
    assert bias.std().item() == pytest.approx(report["bias"]["new_std"] / alpha, rel=1e-4)
    # target_norm: overlap rows now have the target model's mean norm
    assert report["norms"]["new_overlap_mean"] == pytest.approx(
        target_emb[torch.as_tensor(_overlap_ids(src, tgt))].norm(dim=1).mean().item(), rel=1e-4
    )


def _overlap_ids(src, tgt):
    from vtlab.vocab.canonical import match_vocabularies

    return match_vocabularies(src, tgt).target_ids


@pytest.mark.slow
def test_roberta_position_table_follows_new_pad_id():
    backbone = TinyRoberta()
    model, src = backbone.load_model(), backbone.load_tokenizer()
    old_positions = model.roberta.embeddings.position_embeddings.weight.detach().clone()
    tgt = AutoTokenizer.from_pretrained(str(asset_path("minilm")))
    report = apply_transfer(model, src, tgt, Subword(), None, None, TransferOptions(bias="zeros"))
    _check_transferred(model, tgt)
    assert report["position_table_shifted"]
    new_positions = model.roberta.embeddings.position_embeddings.weight.detach()
    # RoBERTa numbers real tokens from pad+1: the first real token used row 2 (pad 1) and now row 1 (pad 0)
    assert torch.equal(new_positions[1], old_positions[2]) and torch.equal(new_positions[10], old_positions[11])


def test_semantic_without_target_model_fails_before_any_work():
    vocab = CorpusWordPiece(name="corpus-wordpiece", vocab_size=2000, corpus=["a tiny corpus"] * 10)
    with pytest.raises(VtlabError, match="init=subword"):
        cached_transfer(Backbone("asset:splade-tiny"), vocab, Semantic())


def test_transfer_is_cached(monkeypatch):
    first = cached_transfer(Backbone("asset:splade-tiny"), bert_vocab(), Mean())
    import vtlab.vocab.transfer as transfer

    monkeypatch.setattr(transfer, "apply_transfer", lambda *a, **k: pytest.fail("recomputed a cached transfer"))
    assert cached_transfer(Backbone("asset:splade-tiny"), bert_vocab(), Mean()) == first


@pytest.mark.slow
def test_bias_follows_init_when_no_target_model():
    """bias=init: overlap tokens keep their source bias; a mean-initialized new token gets the mean source bias."""
    model, tok = _tiny_bert()
    with torch.no_grad():
        model.get_output_embeddings().bias.copy_(torch.randn(len(tok)))
    src_bias = model.get_output_embeddings().bias.detach().clone()
    olmo = TinyModernBert().load_tokenizer()
    from vtlab.vocab.canonical import match_vocabularies

    ov = match_vocabularies(tok, olmo)
    report = apply_transfer(model, tok, olmo, Mean(), None, None, TransferOptions(bias="zmap"))
    assert report["bias"]["mode"] == "init"  # zmap needs a target model: falls back
    new_bias = model.get_output_embeddings().bias.detach()
    assert torch.allclose(new_bias[torch.as_tensor(ov.target_ids)], src_bias[torch.as_tensor(ov.source_ids)])
    new = torch.as_tensor(ov.new_target_ids)
    assert torch.allclose(new_bias[new], src_bias[torch.as_tensor(ov.source_ids)].mean().expand(len(new)), atol=1e-5)


def test_bad_bias_mode():
    with pytest.raises(VtlabError, match="transfer.bias"):
        TransferOptions(bias="copy")


def _sentencepiece_tokenizer(tmp_path):
    """A SentencePiece-style (Metaspace + Unigram, cased) tokenizer in XLM-R's layout, trained on BoolQ passages:
    the tokenizer family of gte-multilingual / XLM-R (their real 250k tokenizers are not available offline)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from vtlab.data.corpora import boolq_passages

    tk = Tokenizer(models.Unigram())
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.decoder = decoders.Metaspace()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tk.train_from_iterator(
        boolq_passages()[:3000], trainers.UnigramTrainer(vocab_size=4000, special_tokens=specials, unk_token="<unk>")
    )
    tk.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
        cls_token="<s>",
        sep_token="</s>",
    )
    tok.save_pretrained(tmp_path)
    return AutoTokenizer.from_pretrained(str(tmp_path))


@pytest.mark.slow
def test_xlmr_sentencepiece_family_to_bert_uncased(tmp_path):
    from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

    src = _sentencepiece_tokenizer(tmp_path)
    torch.manual_seed(0)
    model = XLMRobertaForMaskedLM(
        XLMRobertaConfig(
            vocab_size=len(src),
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=130,
            pad_token_id=src.pad_token_id,
            bos_token_id=0,
            eos_token_id=2,
        )
    ).eval()
    tgt = AutoTokenizer.from_pretrained(str(asset_path("minilm")))
    report = apply_transfer(model, src, tgt, Subword(), None, None, TransferOptions(bias="init"))
    assert report["overlap"]["n_exact"] > 1000  # "▁the" ↔ "the", "s" ↔ "##s", …
    assert report["init"]["subword"] > 10000  # most new WordPiece tokens decompose into SentencePiece pieces
    _check_transferred(model, tgt)
