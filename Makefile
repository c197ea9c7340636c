# Two entry points (see README): `make serve` runs the app, `make test` runs the test suite.
# Each creates ./.venv on first use and installs everything into it.
PYTHON ?= python3
VENV   ?= .venv
# The CPU build by default; e.g. TORCH_SPEC='torch==2.13.0+cu128' for a CUDA machine.
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python

.PHONY: serve test lint install clean deps-system

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

serve: $(VENV)/.installed
	$(VENV)/bin/timeshare serve --config deploy/config.yaml --repo var/model_repository

# Best effort, never failing: Prometheus and Chromium for the operator-view tests
# (tests/integration/ops/test_operator_views.py skips each, saying why, when its binary is
# missing). Installs only what is missing, only where apt-get exists and we are root. First run
# about 30 s (apt-get update + 18 s of install measured here); afterwards two `command -v`s.
deps-system:
	@missing=""; \
	command -v prometheus >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ] && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "installing$$missing with apt-get (for the Prometheus and browser tests)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends $$missing) >/dev/null 2>&1 \
	    || echo "could not install$$missing: those tests will be skipped"; \
	fi; true

test: $(VENV)/.installed deps-system
	$(PY) -m pytest -q -p no:cacheprovider

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) var
