"""Roles of the dashboard and the REST API: viewer reads, editor also changes policies,
admin also manages users and tokens.

A role is a Django group of that name; a superuser is an admin. A signed-in user in no group
has no role, and no access: every page answers 403 saying who can grant one. Checks compare
ranks, so every editor is also a viewer.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied

VIEWER, EDITOR, ADMIN = "viewer", "editor", "admin"
ROLES = (VIEWER, EDITOR, ADMIN)
# Admins manage users and API tokens in the admin site, and unlock sign-ins that the login
# throttle locked (django-axes' access attempts); these are the permissions it needs.
ADMIN_PERMISSIONS = (
    *(
        f"{action}_{model}"
        for action in ("add", "change", "delete", "view")
        for model in ("user", "tokenproxy", "token")
    ),
    "view_group",
    "view_accessattempt",
    "delete_accessattempt",
    "view_accesslog",
)
_RANK = {role: rank for rank, role in enumerate(ROLES)}


def role_of(user: Any) -> str | None:
    if not getattr(user, "is_authenticated", False):
        return None
    if user.is_superuser:
        return ADMIN
    if not hasattr(user, "_karpweb_role"):
        groups = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
        user._karpweb_role = max(groups, key=_RANK.__getitem__, default=None)
    return user._karpweb_role


def admins() -> list[str]:
    """The user names that can grant roles (in the admin site): the admins, superusers too."""
    from django.contrib.auth import get_user_model
    from django.db.models import Q

    users = get_user_model().objects.filter(Q(is_superuser=True) | Q(groups__name=ADMIN), is_active=True)
    return sorted(set(users.values_list("username", flat=True)))


def has_role(user: Any, role: str) -> bool:
    held = role_of(user)
    return held is not None and _RANK[held] >= _RANK[role]


def refusal(user: Any, role: str) -> str:
    """Why ``user`` may not do what needs ``role``, for a person to read."""
    held = role_of(user)
    if held is None:
        return f"You are signed in as {user.get_username()}, but you have no role in karpweb yet."
    return f"This needs the {role} role; you are {'an' if held == ADMIN else 'a'} {held}."


def role_required(role: str) -> Callable:
    """Sign-in first (a redirect to the login page), then the role (403 if it is missing)."""

    def decorate(view: Callable) -> Callable:
        @wraps(view)
        def checked(request, *args, **kwargs):
            if not has_role(request.user, role):
                raise PermissionDenied(refusal(request.user, role))
            return view(request, *args, **kwargs)

        return login_required(checked)

    return decorate


def permission_denied(request, exception: Exception | None = None):
    """The 403 page (karpweb.urls' handler403): what is missing, and who can grant it."""
    from django.shortcuts import render

    context = {"reason": str(exception or "") or "You may not see this page.", "admins": admins()}
    return render(request, "403.html", context, status=403)


def context(request) -> dict[str, Any]:
    """Template context: what the signed-in user may do, so pages hide what they cannot."""
    role = role_of(request.user)
    return {
        "role": role,
        "can_edit": role is not None and has_role(request.user, EDITOR),
        "is_admin": role == ADMIN,
    }
