"""A SECRET_KEY for a checkout that was given none: made once, kept under var/."""

from __future__ import annotations

import secrets
from pathlib import Path


def local_secret_key(var_dir: Path) -> str:
    path = var_dir / "secret_key"
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        pass
    var_dir.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    # O_EXCL: when two processes start at once, the second reads the first one's key.
    try:
        fd = path.open("x", encoding="utf-8")
    except FileExistsError:
        return path.read_text(encoding="utf-8").strip()
    with fd:
        fd.write(key)
    path.chmod(0o600)
    return key
