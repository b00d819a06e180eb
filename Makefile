# Thin wrappers: `make lab` to learn, `make test` to check. Both set up on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch; a bare `torch` pulls a multi-GB CUDA build on Linux.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.setup-done
export NUMBA_CACHE_DIR ?= $(CURDIR)/.memorykit/numba_cache

.PHONY: setup lab test test-fast bench redis-start redis-stop redis-status clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

redis-start: setup
	$(PY) -m memorykit.server start

redis-stop:
	$(PY) -m memorykit.server stop

redis-status:
	$(PY) -m memorykit.server status

lab: redis-start
	$(VENV)/bin/jupyter lab notebooks/

test: setup
	$(PY) -m pytest

test-fast: setup
	$(PY) -m pytest tests

bench: setup
	@for f in benchmarks/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean: redis-stop
	rm -rf $(VENV) .memorykit
