# vtlab — the two front-door commands are `make demo` and `make test`; both set up .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check

.PHONY: install demo test test-fast bench clean-cache

install: $(VENV)/.installed

# torch first: it is the CPU wheel on local disk; anything else asking for torch would pull a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml vtlab/assets.py
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev]'
	$(PY) -m vtlab.assets install
	touch $@

demo: install
	$(PY) -m vtlab

test: install
	$(PY) -m pytest -q

test-fast: install
	$(PY) -m pytest -q -m "not slow"

clean-cache:
	rm -rf $${VTLAB_CACHE:-$$HOME/.cache/vtlab}

bench: install
	$(PY) -m vtlab.bench.transfer --similarity pmi
