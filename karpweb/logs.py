"""Logs: one line per event, as JSON (``KARPWEB_LOG_FORMAT=json``, what the deploy manifests set)
or as text (the default, for reading ``make run`` in a terminal), with the context of the work
that logged it.

* A web request carries a request id: the ``X-Request-ID`` header it came with (a proxy or the
  caller chose it) or a new one; the response echoes it and every line logged while serving the
  request carries it (``RequestIdMiddleware``, a context variable, so threads of a gthread worker
  never mix theirs up).
* A Celery task's lines carry ``task_id`` and ``task_name``; a task sent while serving a request
  also carries that request's id (a message header), so a REST edit and the export task it
  queued can be found together.
* Fields passed with ``extra=`` (a decision's pods, claims and price; a disruption's reason and
  savings) become top-level JSON keys: ``logger.info("...", extra={"pods": 12})``.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from typing import Any

from celery import signals
from django.core.signals import request_finished
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

REQUEST_ID_HEADER = "X-Request-ID"
CELERY_HEADER = "karpweb_request_id"
# An id we did not make is echoed into headers and logs: printable, short, no separators that
# could forge a second header or log field.
_ACCEPTABLE_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")

current_request_id: ContextVar[str | None] = ContextVar("request_id", default=None)
current_task_id: ContextVar[str | None] = ContextVar("task_id", default=None)
current_task_name: ContextVar[str | None] = ContextVar("task_name", default=None)
_CONTEXT = {"request_id": current_request_id, "task_id": current_task_id, "task_name": current_task_name}


class ContextFilter(logging.Filter):
    """Puts the request id and the task of the current context on every record (for the JSON
    formatter, as fields) and a short ``context`` suffix for the text format."""

    def filter(self, record: logging.LogRecord) -> bool:
        suffix = []
        for name, var in _CONTEXT.items():
            value = var.get()
            if value is not None and not hasattr(record, name):
                setattr(record, name, value)
            if getattr(record, name, None):
                suffix.append(f"{name}={getattr(record, name)}")
        record.context = f" [{' '.join(suffix)}]" if suffix else ""
        return True


class JsonFormatter(_JsonFormatter):
    """JSON lines: ``timestamp`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, then the
    context and every ``extra`` field. gunicorn's access lines get their request as fields."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("fmt", "%(levelname)s %(name)s %(message)s")
        kwargs.setdefault("rename_fields", {"levelname": "level", "name": "logger"})
        kwargs.setdefault("timestamp", True)
        # The text format's suffix says again what the fields say.
        kwargs.setdefault("reserved_attrs", [*RESERVED_ATTRS, "context"])
        super().__init__(*args, **kwargs)

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        super().add_fields(log_data, record, message_dict)
        if record.name == "gunicorn.access" and isinstance(record.args, Mapping):
            log_data.update(_access_fields(record.args))


def _access_fields(atoms: Mapping[str, Any]) -> dict[str, Any]:
    """gunicorn's access-log atoms (``glogging.Logger.atoms``) as the fields people query."""
    fields = {
        "method": atoms.get("m"),
        "path": atoms.get("U"),
        "status": _int(atoms.get("s")),
        "duration_ms": round(atoms.get("D", 0) / 1000, 3) if isinstance(atoms.get("D"), int) else None,
        "bytes": atoms.get("B"),
        "remote_addr": atoms.get("h"),
        "request_id": atoms.get("{x-request-id}o"),
    }
    return {key: value for key, value in fields.items() if value not in (None, "-")}


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


# ------------------------------------------------------------------ web requests


class RequestIdMiddleware:
    """First in MIDDLEWARE: every response, errors included, carries the id its lines carry."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        given = request.headers.get(REQUEST_ID_HEADER, "")
        rid = given if _ACCEPTABLE_ID.match(given) else uuid.uuid4().hex
        request.request_id = rid
        # Kept until the request finishes, not only while the middleware runs: Django logs a 4xx
        # or 5xx answer ("Not Found: /x") after the last middleware has returned.
        current_request_id.set(rid)
        response = self.get_response(request)
        response[REQUEST_ID_HEADER] = rid
        return response


@receiver(request_finished)
def _forget_request(**kwargs: Any) -> None:
    # What the thread logs between requests must not carry the last request's id.
    current_request_id.set(None)


# ------------------------------------------------------------------ Celery tasks


@signals.before_task_publish.connect
def _send_request_id(headers: dict[str, Any] | None = None, **kwargs: Any) -> None:
    rid = current_request_id.get()
    if rid is not None and headers is not None:
        headers[CELERY_HEADER] = rid


@signals.task_prerun.connect
def _enter_task(task_id: str | None = None, task: Any = None, **kwargs: Any) -> None:
    request = getattr(task, "request", None)
    # A worker puts message headers on the request; an eager apply() keeps them in .headers.
    sent_by = getattr(request, CELERY_HEADER, None) or (getattr(request, "headers", None) or {}).get(CELERY_HEADER)
    _entered[task_id] = (
        current_task_id.set(task_id),
        current_task_name.set(getattr(task, "name", None)),
        current_request_id.set(sent_by if sent_by is None or _ACCEPTABLE_ID.match(str(sent_by)) else None),
    )


@signals.task_postrun.connect
def _leave_task(task_id: str | None = None, **kwargs: Any) -> None:
    # Back to what was there before: nothing in a worker; the request, for a task run eagerly
    # while serving one.
    tokens = _entered.pop(task_id, None)
    if tokens is not None:
        for var, token in zip((current_task_id, current_task_name, current_request_id), tokens, strict=True):
            var.reset(token)


_entered: dict[str | None, tuple[Token, Token, Token]] = {}
