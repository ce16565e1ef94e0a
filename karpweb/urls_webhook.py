"""The webhook role's URLs: the admission webhook and its probes, nothing else (no pages, API,
sign-in, admin site or /metrics on the port the API server calls). The role's metrics are on a
port of their own, served by gunicorn's master (deploy/gunicorn.conf.py, KARPWEB_METRICS_PORT)."""

from django.urls import path

from provisioning import health, webhook

urlpatterns = [
    path("webhook/validate", webhook.validate, name="webhook-validate"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
]
