"""The REST API (``/api/v1/``): the same validator, querysets and services as the dashboard
and the webhook, for automation."""
