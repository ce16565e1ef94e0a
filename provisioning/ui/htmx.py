"""When a page answers with one of its partials rather than the whole page."""

from __future__ import annotations

from django.http import HttpRequest


def wants_partial(request: HttpRequest) -> bool:
    """An htmx request for a part of the page. A boosted link and a history restore (going
    back to a URL that htmx pushed) both replace the whole page, so they get all of it."""
    htmx = getattr(request, "htmx", None)
    return bool(htmx) and not htmx.boosted and not htmx.history_restore_request
