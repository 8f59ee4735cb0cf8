# vtlab — the two front-door commands are `make demo` and `make test`; both set up .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check

.PHONY: FORCE install demo test test-fast bench clean-cache reproduce-table gpu-smoke gpu-check gpu-check-cpu

install: $(VENV)/.installed

# The stamp holds the sha256 of what the install is made from (pyproject.toml, the assets' list, the torch pin): the
# install runs when that content changes, never for a file's time alone (a fresh clone beside a current venv).
TORCH := torch==2.13.0
INSTALL_HASH := $(shell { cat pyproject.toml vtlab/core/assets.py; echo $(TORCH); } | \
	{ sha256sum 2>/dev/null || shasum -a 256; } | cut -d' ' -f1)
STALE := $(if $(filter $(INSTALL_HASH),$(shell cat $(VENV)/.installed 2>/dev/null)),,FORCE)

# torch first: it is the CPU wheel on local disk; anything else asking for torch would pull a multi-GB CUDA build.
$(VENV)/.installed: $(STALE)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e '.[dev]'
	$(PY) -m vtlab.core.assets install
	echo $(INSTALL_HASH) > $@

FORCE:

demo: install
	$(PY) -m vtlab

# Two workers, a test file per worker at a time (module fixtures stay in one process); TEST_WORKERS=0 runs it in one
# process. What the suite takes: docs/architecture.md (the tests).
# Tiers (markers, tests/conftest.py): test-fast is the unit tier (no subprocess, no training, nothing slow: the inner
# loop, ~3 min); test runs every tier: unit + cli (starts python -m vtlab) + train (trains in process) + slow (> ~20 s).
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test: install
	$(PY) -m ruff check vtlab tests
	$(PY) -m ruff format --check vtlab tests
	$(PYTEST)

test-fast: install
	$(PY) -m ruff check vtlab tests
	$(PY) -m ruff format --check vtlab tests
	$(PYTEST) -m "not slow and not cli and not train"

clean-cache:
	rm -rf $${VTLAB_CACHE:-$$HOME/.cache/vtlab}

# vtlab vs sentence-transformers / ONNX Runtime (fp32, int8) / scipy in one run, each tool in its own process; encoding on
# the testbed's four sets, with nDCG@10 of fp32, bf16, int8 and the ORT rows: outputs/bench/summary.json + a table.
# BENCH_ARGS: e.g. --quick (smoke run), --n-docs 200000 (smaller synthetic set), --only encode,train, --st-docs 500
# (sample sizes and the run's time budget: vtlab/bench/__main__.py)
bench: install
	HF_HUB_OFFLINE=1 $(PY) -m vtlab.bench $(BENCH_ARGS)

# The paper's main table + ablations as Hydra sweeps, then the tables (vtlab/reproduce/__init__.py, vtlab/report/).
# SCALE=testbed (default) runs offline from real pretrained weights, with seeds, paired tests and sanity gates;
# SCALE=paper submits the authors' recipe through hydra/launcher=slurm.
# SEEDS=N overrides every table's own number of seeds.
SCALE ?= testbed
SEEDS ?=
reproduce-table: install
	HF_HUB_OFFLINE=1 $(PY) -m vtlab.reproduce --scale $(SCALE) $(if $(SEEDS),--seeds $(SEEDS))

# One GPU, offline, ~200 steps of the paper's VT fine-tune at ModernBERT-base shape (vtlab/bench/gpu_smoke.py):
# step time, tokens/s, peak GPU memory, MLM-head share -> outputs/bench/gpu_smoke.json. GPU_SMOKE_ARGS: e.g. --steps 100
gpu-smoke: install
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(PY) -m vtlab.bench.gpu_smoke $(GPU_SMOKE_ARGS)

# The paper's multi-process and accelerator paths, each step asserting (vtlab/bench/gpu_check.py): on a GPU machine
# every step (<= 10 min on one H100) -> outputs/bench/gpu_check.json; gpu-check-cpu runs the steps that run on the CPU
# (two gloo processes, tiny shapes) and says which it skipped and why. GPU_CHECK_ARGS: e.g. --only head,sigterm
gpu-check: install
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(PY) -m vtlab.bench.gpu_check $(GPU_CHECK_ARGS)

gpu-check-cpu: install
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(PY) -m vtlab.bench.gpu_check --cpu $(GPU_CHECK_ARGS)
