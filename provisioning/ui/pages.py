"""Small helpers the page views share: pagination and filter values from the query string."""

from __future__ import annotations

from django.core.paginator import Page, Paginator
from django.http import HttpRequest

PAGE_SIZE = 100


def paginate(request: HttpRequest, rows, per_page: int = PAGE_SIZE) -> Page:
    """The page the query string asks for; a page number past the end or not a number
    gives the last or the first page rather than an error."""
    return Paginator(rows, per_page).get_page(request.GET.get("page"))


def query_without_page(request: HttpRequest) -> str:
    """The current filters as a query string, for the links of the pager."""
    query = request.GET.copy()
    query.pop("page", None)
    return query.urlencode()
