"""The Celery app: configured from Django settings (CELERY_*), tasks autodiscovered."""

import os

from celery import Celery
from celery.signals import heartbeat_sent

import provisioning.observability.worker  # noqa: F401  (connects the signals by which a worker serves its metrics)
from karpweb import heartbeat

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "karpweb.settings")

app = Celery("karpweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Only where a liveness file is wanted: a receiver makes every worker heartbeat send a signal.
if os.environ.get(heartbeat.ENV):
    heartbeat_sent.connect(heartbeat.on_worker_heartbeat)
