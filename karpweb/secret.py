"""Secrets: the key a checkout makes for itself, and the checks a production secret must pass.

A checkout given no SECRET_KEY makes one once, under var/. In production
(``KARPWEB_PRODUCTION=true``) that would give every replica a key of its own, so sessions and
CSRF tokens signed by one would fail on the next: there the key must be given, and a
placeholder, a short key or a missing one stops the process with a message naming the variable.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

# deploy/secret.example.yaml's placeholder, and the prefix of the keys `startproject` writes.
PLACEHOLDERS = ("REPLACE_ME", "django-insecure-")
MAKE_ONE = "python -c 'import secrets; print(secrets.token_urlsafe(50))'"


def local_secret_key(var_dir: Path) -> str:
    """The key of this checkout: read from ``var_dir/secret_key``, or made there once.

    The file is created with mode 0600 in the same call that creates it (O_CREAT | O_EXCL), so it
    is never readable by others, not even for a moment; when two processes start at once, the
    second finds the file and reads the first one's key.
    """
    path = var_dir / "secret_key"
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    var_dir.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read(path)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(key)
    return key


def _read(path: Path) -> str:
    # A second process may find the file between the first one's create and write: empty for
    # a moment. The key is short, so the wait is too.
    for _ in range(50):
        key = path.read_text(encoding="utf-8").strip()
        if key:
            return key
        time.sleep(0.01)
    raise ImproperlyConfigured(f"{path} is empty: delete it and start again, or set SECRET_KEY")


def production_secret(name: str, value: str, minimum: int) -> str:
    """``value`` if it can sign in production; otherwise ImproperlyConfigured naming ``name``."""
    how = f"set {name} (or {name}_FILE, a mounted file) to at least {minimum} random characters, e.g. {MAKE_ONE}"
    if not value:
        raise ImproperlyConfigured(
            f"{name} is not set. With KARPWEB_PRODUCTION=true every replica must use the same secret: {how}."
        )
    for placeholder in PLACEHOLDERS:
        if placeholder.lower() in value.lower():
            raise ImproperlyConfigured(f"{name} is the placeholder {placeholder!r}, not a secret: {how}.")
    if len(value) < minimum:
        raise ImproperlyConfigured(f"{name} is only {len(value)} characters long: {how}.")
    if len(set(value)) < 5:
        different = len(set(value))
        raise ImproperlyConfigured(f"{name} has only {different} different characters, not a random secret: {how}.")
    return value
