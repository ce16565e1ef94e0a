"""Model fields."""

from __future__ import annotations

from django.db import models


class LargeJSONField(models.JSONField):
    """A JSONField for values of kilobytes (a NodeClaim's launch options, alternatives and
    spec), bulk-inserted as rows of values rather than as arrays.

    On PostgreSQL, Django 5.2 bulk-inserts through ``UNNEST`` of one array per column, and
    psycopg's client-side binding escapes each element of such an array in Python, quote by
    quote. The 50 NodeClaims of a 1,000-pod run (450 KB of JSON) took 2–3× longer to insert
    that way, on the way from a decision to its launches. Django takes the plain ``VALUES``
    form for fields with a placeholder of their own, which this is. Small values in many
    rows (pods) are the other way round, faster as arrays: they keep Django's JSONField.
    """

    def get_placeholder(self, value, compiler, connection) -> str:
        return "%s"
