# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-all
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: demo test test-all bench install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[all]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m datarax demo

test: $(STAMP)
	$(PY) -m pytest -n 2 --durations=10

test-all: $(STAMP)
	$(PY) -m pytest -n 2 -m "" --durations=10

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install -q -e ".[all,bench]"
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache
