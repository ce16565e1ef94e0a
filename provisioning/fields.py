"""Model fields."""

from __future__ import annotations

from django.db import models


class JSONField(models.JSONField):
    """Django's JSONField, bulk-inserted as rows of values rather than as arrays.

    On PostgreSQL, Django 5.2 bulk-inserts through ``UNNEST`` of one array per column, and
    psycopg's client-side binding escapes each element of such an array in Python, quote by
    quote. JSON is mostly quotes: the 50 NodeClaims of a 1,000-pod run (450 KB of JSON) took
    2–3× longer to insert that way, on the way from a decision to its launches. Django takes
    the plain ``VALUES`` form for fields with a placeholder of their own, which this is.
    """

    def get_placeholder(self, value, compiler, connection) -> str:
        return "%s"
