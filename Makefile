# Two entry points (see README): `make serve` runs the app, `make test` runs the test suite.
# Each creates ./.venv on first use and installs everything into it.
PYTHON ?= python3
VENV   ?= .venv
# The CPU build by default; e.g. TORCH_SPEC='torch==2.13.0+cu128' for a CUDA machine.
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python

.PHONY: serve test lint install clean deps-system grpc-stubs

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

# The Open Inference Protocol's gRPC messages (router/grpc_v2), committed, regenerated only when
# the .proto changes (grpcio-tools from the test extra). Into a private descriptor pool, not the
# process-wide one: tritonclient.grpc registers the same `inference.*` names, and a process
# (a test, a benchmark) may import both.
grpc-stubs: $(VENV)/.installed
	$(PY) -m grpc_tools.protoc -Irouter/grpc_v2 --python_out=router/grpc_v2/_generated \
	  --pyi_out=router/grpc_v2/_generated router/grpc_v2/grpc_predict_v2.proto
	sed -i 's/^DESCRIPTOR = _descriptor_pool.Default()/DESCRIPTOR = _descriptor_pool.DescriptorPool()/' \
	  router/grpc_v2/_generated/grpc_predict_v2_pb2.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) var
