# syntax=docker/dockerfile:1
# Timeshare's image: the checkout installed as `make install` does, run as a non-root user.
# The image the Kubernetes manifests run (deploy/kubernetes, docs/SCALING.md); KubeRay replaces
# the command with its `ray start`.
#
#   CPU (default):  docker build -t timeshare:0.1.0-cpu .
#   CUDA:           docker build -t timeshare:0.1.0-cu128 \
#                     --build-arg TORCH_SPEC='torch==2.13.0+cu128' \
#                     --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 .
#
# The CUDA build of torch brings its CUDA libraries as wheels, so one base image serves both;
# the node's NVIDIA driver and container toolkit provide the rest.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

# The torch build, the Makefile's TORCH_SPEC: the CPU build by default. TORCH_INDEX_URL is
# where that build is published (pip prefers its +cpu / +cuXYZ local version over PyPI's).
ARG TORCH_SPEC=torch==2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# The Makefile's variables, with the image's paths.
ARG PYTHON=python3
ARG UID=1000

# wget: KubeRay's injected health probes run it on Ray versions before 2.53.
RUN apt-get update \
 && apt-get install -y --no-install-recommends wget ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid ${UID} timeshare \
 && useradd --uid ${UID} --gid ${UID} --create-home --shell /bin/bash timeshare \
 && mkdir /app && chown ${UID}:${UID} /app

# Everything below runs, and is owned, by the non-root user (numeric: runAsNonRoot can check).
USER ${UID}:${UID}
WORKDIR /app
ENV VENV=/app/.venv \
    PY=/app/.venv/bin/python \
    PATH=/app/.venv/bin:${PATH} \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1

# The Makefile's install recipe ($(VENV)/.installed), one step per line; torch before the
# sources so that a code change does not reinstall it.
RUN ${PYTHON} -m venv ${VENV}
RUN ${PY} -m pip install -q --upgrade pip
RUN PIP_EXTRA_INDEX_URL="${TORCH_INDEX_URL}" ${PY} -m pip install -q "${TORCH_SPEC}"
COPY --chown=${UID}:${UID} . .
RUN ${PY} -m pip install -q -e '.[test]'

# Serve's proxy, Timeshare's listener, gRPC (deploy/config.yaml).
EXPOSE 8000 8100 8101
# What `make serve` runs (a single machine; the config binds loopback, so use it from inside
# the container). On Kubernetes KubeRay starts Ray instead and deploys the rendered config.
CMD ["timeshare", "serve", "--config", "deploy/config.yaml", "--repo", "var/model_repository"]
