"""Roles of the dashboard and the REST API: viewer reads, editor also changes policies,
admin also manages users and tokens.

A role is a Django group of that name; a superuser is an admin, and a signed-in user in no
group is a viewer. Checks compare ranks, so every editor is also a viewer.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied

VIEWER, EDITOR, ADMIN = "viewer", "editor", "admin"
ROLES = (VIEWER, EDITOR, ADMIN)
# Admins manage users and API tokens in the admin site; these are the permissions it needs.
ADMIN_PERMISSIONS = (
    *(
        f"{action}_{model}"
        for action in ("add", "change", "delete", "view")
        for model in ("user", "tokenproxy", "token")
    ),
    "view_group",
)
_RANK = {role: rank for rank, role in enumerate(ROLES)}


def role_of(user: Any) -> str | None:
    if not getattr(user, "is_authenticated", False):
        return None
    if user.is_superuser:
        return ADMIN
    cached = getattr(user, "_karpweb_role", None)
    if cached is None:
        groups = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
        cached = max(groups, key=_RANK.__getitem__, default=VIEWER)
        user._karpweb_role = cached
    return cached


def has_role(user: Any, role: str) -> bool:
    held = role_of(user)
    return held is not None and _RANK[held] >= _RANK[role]


def role_required(role: str) -> Callable:
    """Sign-in first (a redirect to the login page), then the role (403 if it is missing)."""

    def decorate(view: Callable) -> Callable:
        @wraps(view)
        def checked(request, *args, **kwargs):
            if not has_role(request.user, role):
                raise PermissionDenied(f"this needs the {role} role")
            return view(request, *args, **kwargs)

        return login_required(checked)

    return decorate


def context(request) -> dict[str, Any]:
    """Template context: what the signed-in user may do, so pages hide what they cannot."""
    role = role_of(request.user)
    return {
        "role": role,
        "can_edit": role is not None and has_role(request.user, EDITOR),
        "is_admin": role == ADMIN,
    }
