"""The webhook role's URLs: the admission webhook, its probes and its metrics, nothing else
(no pages, API, sign-in or admin site on the port the API server calls)."""

from django.urls import path

from provisioning import health, webhook
from provisioning.observability.views import metrics

urlpatterns = [
    path("webhook/validate", webhook.validate, name="webhook-validate"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics, name="metrics"),
]
