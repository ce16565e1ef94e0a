"""The Celery app: configured from Django settings (CELERY_*), tasks autodiscovered."""

import os

from celery import Celery

import provisioning.observability.worker  # noqa: F401  (connects the signals by which a worker serves its metrics)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "karpweb.settings")

app = Celery("karpweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
