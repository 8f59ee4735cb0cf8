"""Corpus encoding as Lightning predict: the merged index is the same with 1 and 2 processes (gloo, ddp_spawn)."""

import numpy as np
import pytest
import scipy.sparse as sp

from vtlab.backbones import Backbone
from vtlab.models.encoder import SpladeEncoder
from vtlab.models.predict import encode_corpus


@pytest.fixture(scope="module")
def encoder():
    # fp32 pinned: the two-process run batches documents differently, and bf16 rounding depends on the batch's padding,
    # so only fp32 can be compared exactly on a CPU where precision=auto picks bf16
    return SpladeEncoder.from_backbone(
        Backbone("asset:splade-tiny", family="bert"), doc_max_length=48, precision="fp32"
    )


@pytest.fixture(scope="module")
def texts():
    from vtlab.data.boolq import validation_pairs

    passages = list(dict.fromkeys(p for _, p in validation_pairs()))[:37]  # 37: batches of 8 leave a ragged tail
    return passages[:-1] + ["short"]


def assert_same_csr(a: sp.csr_matrix, b: sp.csr_matrix) -> None:
    assert a.shape == b.shape
    np.testing.assert_array_equal(a.indptr, b.indptr)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.data, b.data)


@pytest.mark.slow
def test_two_processes_give_the_same_index_as_one(encoder, texts, tmp_path):
    one = encode_corpus(encoder, texts, tmp_path / "one", batch_size=8, threads=1)
    two = encode_corpus(
        encoder,
        texts,
        tmp_path / "two",
        batch_size=8,
        threads=1,
        trainer_kwargs={"devices": 2, "strategy": "ddp_spawn"},
    )
    assert len(list((tmp_path / "two" / "shards").glob("shard-r0001-*.npz"))) >= 1  # rank 1 really encoded a share
    assert_same_csr(one, two)
    # and both equal the in-process encoder (other batches, so equal up to float rounding)
    ref = encoder.encode(texts, "doc", batch_size=8, show_progress=False)
    assert (abs(one - ref) > 1e-5).nnz == 0
    assert one.nnz == ref.nnz
