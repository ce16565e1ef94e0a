# karpweb: `make run` starts the platform on embedded defaults; `make test` runs the suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup run test test-fast lint crds manifests check-deploy image image-check base-image bench-webhook bench-catalog bench-solver bench-pipeline bench-capacity bench-disruption bench-interruption bench-ui fuzz-api fuzz-solver clean

setup: $(STAMP)

# Reinstall only when a requirements file changed: `make setup` is idempotent and cheap.
$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -r requirements-dev.txt
	touch $(STAMP)

run: setup
	exec $(PY) manage.py run

test: setup
	$(PY) -m pytest

test-fast: setup
	$(PY) -m pytest -m "not slow"

lint: setup
	$(VENV)/bin/ruff check .

# Render deploy/crds/ from the schema the validator uses.
crds: setup
	$(PY) manage.py crds --out deploy/crds

# The production manifests as `kubectl apply -k deploy/overlays/production` would apply them;
# OVERLAY=production-keda (workers scaled on the Celery queue by KEDA) or another overlay.
OVERLAY ?= production
manifests: setup
	$(VENV)/bin/kubectl kustomize deploy/overlays/$(OVERLAY)

# `manage.py check --deploy` with the settings the production overlay gives the web and webhook
# pods (scripts/check_deploy.py): any warning fails.
check-deploy: setup
	$(PY) scripts/check_deploy.py

# The image (Dockerfile), built with BuildKit: `make image`, then `make image-check` runs each role
# of it the way deploy/ does. Where Docker Hub cannot be reached, `make base-image` first makes a
# stand-in for the base from Debian's packages (scripts/base_image.sh, as root), and
# `make image PYTHON_IMAGE=$(STANDIN_IMAGE)` builds on it.
IMAGE ?= karpweb:dev
PYTHON_IMAGE ?= python:3.11-slim-bookworm
STANDIN_IMAGE ?= karpweb/python:3.11-bookworm
DOCKER ?= docker
# Docker 23 and later build with BuildKit through the buildx plugin; older CLIs (Debian's
# docker.io, 20.10) have it built in.
DOCKER_BUILD ?= $(shell $(DOCKER) buildx version >/dev/null 2>&1 && echo "$(DOCKER) buildx build --load" || echo "DOCKER_BUILDKIT=1 $(DOCKER) build")
# The build reaches the package index through the host's network (and whatever proxy it uses).
BUILD_NETWORK ?= host
# The CA bundle pip needs in the build (a TLS-intercepting proxy, a private index's CA), passed as
# a build secret: by default the one pip on this machine is told to use, if any.
PIP_CA ?= $(PIP_CERT)
comma := ,

image:
	$(DOCKER_BUILD) --network $(BUILD_NETWORK) --build-arg PYTHON_IMAGE=$(PYTHON_IMAGE) \
		$(if $(PIP_CA),--secret id=pip-ca$(comma)src=$(PIP_CA)) -t $(IMAGE) .

image-check:
	$(PYTHON) scripts/image_check.py --image $(IMAGE) --docker $(DOCKER)

base-image:
	DOCKER=$(DOCKER) scripts/base_image.sh $(STANDIN_IMAGE)

# The webhook role over plain HTTP and TLS at 200 reviews/s, each beside a bare WSGI app under the
# same gunicorn measured in the same run (bench/bare_webhook.py).
bench-webhook: setup
	$(PY) bench/webhook_latency.py

bench-catalog: setup
	$(PY) bench/catalog.py

bench-solver: setup
	$(PY) bench/solver.py
	$(PY) bench/simulate.py

bench-pipeline: setup
	$(PY) bench/pipeline.py --workers 4

# Provisioning runs per minute by batch size, on a cluster already running pods; the cost of a
# /metrics scrape; then how many admission reviews one webhook replica answers per second.
bench-capacity: setup
	$(PY) bench/capacity.py
	$(PY) bench/webhook_latency.py --variants tls --concurrency 8 --duration 15

# Disruption rounds on 1,000 nodes after 60% of their 10,000 pods went away, until nothing is
# left to consolidate: round time, cost against the LP bound, evictions, PDB and do-not-disrupt
# violations (`bench/disruption.py --small` for a quick check).
bench-disruption: setup
	$(PY) bench/disruption.py

bench-interruption: setup
	$(PY) bench/interruption.py

# schemathesis against the OpenAPI schema: no server errors, only documented answers.
fuzz-api: setup
	$(PY) scripts/fuzz_api.py

# THE solver's properties over thousands of random snapshots (make test runs a few hundred):
# every plan passes THE verifier, and no pod that fits alone on a new node stays pending.
fuzz-solver: setup
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest tests/test_solver_properties.py -p no:cacheprovider

# Page render times on 10,000 pods, 1,000 nodes and 100,000 decisions in PostgreSQL.
bench-ui: setup
	$(PY) bench/ui.py

clean:
	rm -rf $(VENV) var .pytest_cache
