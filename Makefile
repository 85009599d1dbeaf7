# Two commands on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# The CPU build of PyTorch on this machine's disk; an unpinned torch pulls a multi-GB CUDA build.
TORCH_VERSION ?= 2.13.0
CONSTRAINTS := constraints/constraints-3.11.txt
export DLTRAIN_HOME ?= $(CURDIR)/.dltrain
DEMO_START ?= 2026-11-24
DEMO_DAYS ?= 3
PYTEST_ARGS ?=

.PHONY: install demo test bench lint clean constraints

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q torch==$(TORCH_VERSION)
	$(PIP) install -q -c $(CONSTRAINTS) -e '.[all,dev]'
	touch $@

demo: install
	$(VENV)/bin/dltrain demo run --start $(DEMO_START) --days $(DEMO_DAYS)

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

bench: install
	$(PY) -m benchmarks

lint: install
	$(VENV)/bin/ruff check airflow_provider_dltrain dags tests benchmarks
	$(VENV)/bin/ruff format --check airflow_provider_dltrain dags tests benchmarks
	$(VENV)/bin/mypy airflow_provider_dltrain

# Regenerate the exact versions every install uses (run after changing dependencies).
constraints: install
	$(PIP) freeze --exclude-editable | grep -v -E '^(torch==|airflow-provider-dltrain)' > $(CONSTRAINTS)

clean:
	rm -rf $(DLTRAIN_HOME) .pytest_cache .mypy_cache .ruff_cache build *.egg-info spark-warehouse metastore_db derby.log
