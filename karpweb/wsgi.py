"""WSGI entry point for gunicorn (web and webhook roles)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "karpweb.settings")

application = get_wsgi_application()
