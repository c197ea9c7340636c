# Two entry points (see README): `make serve` runs the app, `make test` runs the test suite.
# Each creates ./.venv on first use and installs everything into it.
PYTHON ?= python3
VENV   ?= .venv
# The CPU build by default; e.g. TORCH_SPEC='torch==2.13.0+cu128' for a CUDA machine.
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python

.PHONY: serve test lint install clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

serve: $(VENV)/.installed
	$(VENV)/bin/timeshare serve --config deploy/config.yaml --repo var/model_repository

test: $(VENV)/.installed
	$(PY) -m pytest -q -p no:cacheprovider

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) var
