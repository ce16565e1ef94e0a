"""The Celery app: configured from Django settings (CELERY_*), tasks autodiscovered."""

import os

from celery import Celery

from provisioning.observability import worker as worker_metrics

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "karpweb.settings")
# Before any module imports prometheus_client: the pool's processes count in shared files.
worker_metrics.share_between_processes()

app = Celery("karpweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
