# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-all
BENCH_STAMP := $(VENV)/.installed-bench
# MosaicML Streaming, the peer of benchmarks/w2_remote.py: it needs torch and numpy<2.2,
# so it gets a venv of its own (never needed by `make test`).
STREAMING_VENV := .venv-streaming

.PHONY: demo test test-all bench bench-streaming-env docs install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[all]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m datarax demo

# PYTHONDONTWRITEBYTECODE= (empty): where the environment turns bytecode files off, every
# test process (and every fresh process a test starts) would compile the project's and the
# tests' sources again, and pytest rewrite every test module's asserts again (~5 s a worker).
test: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -n 2 --dist worksteal --durations=10

test-all: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -n 2 -m "" --durations=10

# torchvision 0.28.0 is the release built with torch 2.13 (the bench extra's pin), for
# W7's torchvision.transforms.v2 peer. The index's wheel is a CUDA build: --no-deps keeps
# the CPU torch, and benchmarks/w7_contenders.py imports it past its CUDA-only parts.
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install -q -e ".[all,bench]"
	$(PY) -m pip install -q --no-deps "torchvision==0.28.0"
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m benchmarks.run

# torch==2.13.0 is the CPU build where pip finds its wheel locally (as for `bench`);
# torchvision 0.28.0 (its release, which mosaicml-streaming requires) is the index's CUDA
# build, imported past its CUDA-only parts by benchmarks/streaming_peer.py.
bench-streaming-env: $(STREAMING_VENV)/.installed
$(STREAMING_VENV)/.installed:
	$(PYTHON) -m venv $(STREAMING_VENV)
	$(STREAMING_VENV)/bin/python -m pip install -q "torch==2.13.0" "torchvision==0.28.0" \
		"mosaicml-streaming==0.13.0" "numpy<2.2" boto3
	touch $@

# The documentation site (mkdocs.yml) into site/; --strict turns broken links and
# missing API references into errors.
docs: $(STAMP)
	$(PY) -m mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) $(STREAMING_VENV) build dist site src/*.egg-info .pytest_cache
