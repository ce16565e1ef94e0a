# One image for every karpweb process; the first argument picks the role:
#   web (default), webhook, worker, beat, watch, migrate, await-migrations, alive, manage ...
# See karpweb/entrypoint.py, and deploy/ for how Kubernetes runs each role.
#
#   docker build -t karpweb:dev .           (BuildKit, as Docker 23 and later build; or `make image`)
#   docker run --rm -p 8000:8000 -e SECRET_KEY=... -e DATABASE_URL=... -e REDIS_URL=... karpweb:dev web

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# -- builder: the pinned requirements, installed into a virtualenv that the final stage copies whole.
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/venv
# Requirements before the code: this layer is rebuilt only when they change.
COPY requirements.txt /tmp/requirements.txt
# Every requirement ships manylinux wheels (psycopg's carries libpq), so no compiler is needed.
# Behind a TLS-intercepting proxy or a private index's own CA, pip is given that CA bundle as a
# BuildKit secret, mounted for this step only and kept in no layer:
#   docker build --secret id=pip-ca,src=/etc/ssl/certs/ca-certificates.crt ...
RUN --mount=type=secret,id=pip-ca \
    if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
    && /opt/venv/bin/pip install -r /tmp/requirements.txt

# -- final: the virtualenv and the code, nothing else.
FROM ${PYTHON_IMAGE}
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    KARPWEB_VAR_DIR=/var/lib/karpweb \
    STATIC_ROOT=/app/staticfiles
# A fixed uid that Kubernetes' runAsNonRoot can check; the var directory is the only place it
# writes (the deployments mount a volume there and keep the root filesystem read-only).
RUN groupadd --system --gid 10001 karpweb \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin karpweb \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/karpweb
COPY --from=builder /opt/venv /opt/venv
WORKDIR /app
COPY manage.py ./
COPY karpweb/ karpweb/
COPY provisioning/ provisioning/
COPY templates/ templates/
COPY static/ static/
COPY deploy/gunicorn.conf.py deploy/
# Static files are collected here, once, so web pods serve them straight from the image. The key
# only lets the settings load for this step; it is not kept in the image.
RUN SECRET_KEY=collectstatic-only python manage.py collectstatic --noinput --verbosity 0 \
    && python -m compileall -q -j 0 karpweb provisioning
USER 10001:10001
EXPOSE 8000 8443
# No HEALTHCHECK: it would apply to every role alike; Kubernetes probes each role its own way
# (deploy/), and `alive` is the check of the roles without a port.
ENTRYPOINT ["python", "-m", "karpweb.entrypoint"]
CMD ["web"]
