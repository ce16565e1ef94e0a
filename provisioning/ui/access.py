"""Roles of the dashboard and the REST API: viewer reads, editor also changes policies,
admin also manages users and tokens.

A role is a Django group of that name; a superuser is an admin. A signed-in user in no group
has no role, and no access: every page sends them to one saying so and who can grant one (as
every page sends anonymous callers to sign in), the API answers 403. Checks compare ranks, so
every editor is also a viewer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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
    # What viewers read on the dashboard, as the admin site shows it (read-only there).
    "view_nodepool",
    "view_ec2nodeclass",
    "view_auditentry",
    "view_accessattempt",
    "delete_accessattempt",
    "view_accesslog",
)
_RANK = {role: rank for rank, role in enumerate(ROLES)}


def sync_role_groups(using: str = "default", **kwargs: Any) -> None:
    """The three role groups exist, the admin group holds exactly ADMIN_PERMISSIONS and the
    others none (whatever was added by hand): a role grants what this module says, no more."""
    from django.contrib.auth.models import Group, Permission

    for role in ROLES:
        group, _ = Group.objects.using(using).get_or_create(name=role)
        wanted = Permission.objects.using(using).filter(codename__in=ADMIN_PERMISSIONS) if role == ADMIN else []
        group.permissions.set(wanted)


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
    """Sign-in first (a redirect to the login page), then any role at all (a redirect to the
    page that says who grants one), then this role (403 if it is missing)."""

    def decorate(view: Callable) -> Callable:
        @wraps(view)
        def checked(request, *args, **kwargs):
            if role_of(request.user) is None:
                from django.contrib.auth.views import redirect_to_login

                return redirect_to_login(request.get_full_path(), "no-role")
            if not has_role(request.user, role):
                raise PermissionDenied(refusal(request.user, role))
            return view(request, *args, **kwargs)

        return login_required(checked)

    return decorate


def _explain(request, reason: str, status: int):
    from django.shortcuts import render

    return render(request, "403.html", {"reason": reason, "admins": admins()}, status=status)


@login_required
def no_role(request):
    """Where a signed-in user without a role is sent: what they lack and who can grant it. A
    page of its own (200), like the sign-in page, not an error."""
    from django.shortcuts import redirect
    from django.utils.http import url_has_allowed_host_and_scheme

    if role_of(request.user) is not None:  # granted meanwhile: on to where they were going
        target = request.GET.get("next", "")
        safe = url_has_allowed_host_and_scheme(target, {request.get_host()}, require_https=request.is_secure())
        return redirect(target if safe and target else "provisioning:overview")
    return _explain(request, refusal(request.user, VIEWER), 200)


def permission_denied(request, exception: Exception | None = None):
    """The 403 page (karpweb.urls' handler403): what is missing, and who can grant it."""
    return _explain(request, str(exception or "") or "You may not see this page.", 403)


def context(request) -> dict[str, Any]:
    """Template context: what the signed-in user may do, so pages hide what they cannot."""
    role = role_of(request.user)
    return {
        "role": role,
        "can_edit": role is not None and has_role(request.user, EDITOR),
        "is_admin": role == ADMIN,
    }


# --------------------------------------------------------------------------------------------------
# Who may call what: every URL each role serves, every method it accepts, and who may call it.
#
# The one table of it. tests/test_access.py walks both URLconfs and calls every route with every
# method as each kind of caller, and fails on any answer that this table does not predict, on a
# route without a row and on a row without a route; README's "Access" section is this table
# (``manage.py access`` prints it; a test compares).

ANYONE = "anyone"
SIGNED_IN = "signed in"  # any signed-in user, with a role or without
METRICS = "Prometheus"  # Authorization: Bearer KARPWEB_METRICS_TOKEN (open on a checkout)
# Whoever reaches the webhook role's port: the NetworkPolicy and the webhook's own Service bring
# the API server there, over TLS with the caBundle it was given; the request itself proves nothing.
# (The role's metrics are on another port, outside Django: KARPWEB_METRICS_PORT, not a route here.)
API_SERVER = "the API server"

# How a caller proves who it is on a route; it decides what a refusal looks like.
PAGE = "session"  # signed in at /accounts/login/: anonymous is sent there, no role to /accounts/no-role/,
# a missing role gets 403
API = "token or session"  # Authorization: Token KEY, or the session: 401 without, 403 without the role
ADMIN_SITE = "session, admin site"  # Django's admin site: whoever is not an admin is sent to its sign-in
BEARER = "bearer token"  # /metrics: 401 without the token (403 in production while none is set)
TLS = "TLS, its own port"  # the webhook role: nothing in the request, see API_SERVER
NONE = "none"  # nothing to prove

READ = ("GET", "HEAD")
API_READ = ("GET", "HEAD", "OPTIONS")  # OPTIONS: DRF's description of the endpoint
ALL = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE")


@dataclass(frozen=True)
class Route:
    """One URL pattern: ``path`` as the URLconf spells it (``<name>`` for a parameter; ending in
    "…" for every URL under it), who may call each method it accepts, and how they prove it."""

    path: str
    methods: dict[str, str]
    auth: str
    what: str

    @property
    def any_method(self) -> bool:
        """The row speaks of every method the route accepts, whichever those are (the admin site)."""
        return set(self.methods) == set(ALL)

    def covers(self, path: str) -> bool:
        if self.path.endswith("…"):
            return path.startswith(self.path[:-1])
        return path == self.path


def _methods(*groups: tuple[tuple[str, ...], str]) -> dict[str, str]:
    return {method: who for methods, who in groups for method in methods}


def page(path: str, what: str, read: str | None = VIEWER, write: str | None = None, post_only=False) -> Route:
    methods = _methods(*([] if post_only or read is None else [(READ, read)]), *([(("POST",), write)] if write else []))
    return Route(path, methods, PAGE, what)


def api(path: str, what: str, write: tuple[str, ...] = (), post_is_read: bool = False, read=API_READ) -> Route:
    methods = _methods((read, VIEWER), (write, EDITOR))
    if post_is_read:
        methods["POST"] = VIEWER
    return Route(path, methods, API, what)


WEB_ROUTES: tuple[Route, ...] = (
    page("", "overview"),
    page("pods/", "pending pods"),
    page("decisions/", "decisions"),
    page("decisions/<int:pk>/", "a decision"),
    page("nodes/", "nodes"),
    page("nodes/<str:name>/", "a node"),
    page("disruptions/", "disruptions"),
    page("interruptions/", "interruptions"),
    page("spend/", "spend"),
    page("whatif/", "what-if: a plan, nothing written", write=VIEWER),
    page("whatif/disruption/", "what-if of the disruption round", write=VIEWER),
    page("policies/", "policies"),
    page("policies/apply/", "apply a reviewed change", write=EDITOR, post_only=True),
    page("policies/new/<str:kind>/", "a new policy from a template", read=EDITOR, write=EDITOR),
    page("policies/new/<str:kind>/validate/", "live validation", write=EDITOR, post_only=True),
    page("policies/<str:kind>/<str:name>/", "a policy and its history"),
    page("policies/<str:kind>/<str:name>/edit/", "edit (form or YAML), review", read=EDITOR, write=EDITOR),
    page("policies/NodePool/<str:name>/replicas/", "scale a static NodePool", write=EDITOR, post_only=True),
    page("policies/<str:kind>/<str:name>/validate/", "live validation", write=EDITOR, post_only=True),
    page("policies/<str:kind>/<str:name>/delete/", "delete", read=EDITOR, write=EDITOR),
    page("policies/<str:kind>/<str:name>/history/<int:entry_id>/revert/", "review a revert", read=EDITOR),
    api("api/v1/nodepools/", "list; create", write=("POST",)),
    api("api/v1/nodepools/<str:name>/", "read; replace, merge patch, delete", write=("PUT", "PATCH", "DELETE")),
    api("api/v1/nodepools/<str:name>/scale/", "the scale subresource (autoscaling/v1 Scale)", write=("PUT", "PATCH")),
    api("api/v1/ec2nodeclasses/", "list; create", write=("POST",)),
    api("api/v1/ec2nodeclasses/<str:name>/", "read; replace, merge patch, delete", write=("PUT", "PATCH", "DELETE")),
    api("api/v1/nodeoverlays/", "list; create", write=("POST",)),
    api("api/v1/nodeoverlays/<str:name>/", "read; replace, merge patch, delete", write=("PUT", "PATCH", "DELETE")),
    api("api/v1/simulate/", "plan manifests, nothing written", read=("OPTIONS",), post_is_read=True),
    api("api/v1/simulate/disruption/", "the disruption round, planned", post_is_read=True),
    api("api/v1/spend/", "spend over time"),
    api("api/v1/catalog/instancetypes/", "instance types and offerings"),
    api("api/v1/pods/", "pods"),
    api("api/v1/pods/<key>/", "a pod"),
    api("api/v1/nodeclaims/", "NodeClaims"),
    api("api/v1/nodeclaims/<name>/", "a NodeClaim"),
    api("api/v1/nodes/", "nodes"),
    api("api/v1/nodes/<name>/", "a node"),
    api("api/v1/decisions/", "decisions"),
    api("api/v1/decisions/<pk>/", "a decision"),
    api("api/v1/disruptions/", "disruptions"),
    api("api/v1/disruptions/<pk>/", "a disruption"),
    Route("api/v1/<anything else>", _methods((ALL, ANYONE)), NONE, "no such endpoint: 404 as a Status"),
    api("api/schema/", "the OpenAPI schema", read=READ),
    api("api/docs/", "Swagger UI", read=READ),
    Route("healthz", _methods((READ, ANYONE)), NONE, "liveness"),
    Route("readyz", _methods((READ, ANYONE)), NONE, "readiness: database and Redis"),
    Route("metrics", _methods((READ, METRICS)), BEARER, "Prometheus metrics"),
    Route("accounts/login/", _methods((READ + ("POST",), ANYONE)), NONE, "sign in (throttled)"),
    Route("accounts/no-role/", _methods((READ, SIGNED_IN)), PAGE, "where a user without a role is sent"),
    Route("accounts/logout/", {"POST": ANYONE}, NONE, "sign out"),
    # Django's own login view, as the admin site builds it (PUT posts the form, OPTIONS lists them).
    Route("admin/login/", _methods((READ + ("POST", "PUT", "OPTIONS"), ANYONE)), NONE, "the admin site's sign-in"),
    Route("admin/…", _methods((ALL, ADMIN)), ADMIN_SITE, "the admin site: users, roles, API tokens, sign-in locks"),
)

WEBHOOK_ROUTES: tuple[Route, ...] = (
    Route("webhook/validate", {"POST": API_SERVER}, TLS, "AdmissionReview in, AdmissionReview out"),
    Route("healthz", _methods((READ, ANYONE)), NONE, "liveness"),
    Route("readyz", _methods((READ, ANYONE)), NONE, "readiness"),
)

# Served by WhiteNoise before any URLconf is asked.
STATIC = Route("static/…", _methods((READ, ANYONE)), NONE, "CSS, htmx, icons")

ROUTES = {"web": (*WEB_ROUTES, STATIC), "webhook": WEBHOOK_ROUTES}


def route_for(role: str, path: str) -> Route | None:
    """The row of ``path`` (a normalised URLconf route) among ``role``'s: an exact row first."""
    rows = ROUTES[role]
    exact = [r for r in rows if r.path == path]
    return exact[0] if exact else next((r for r in rows if r.covers(path)), None)


def markdown() -> str:
    """README's Access table, from the rows above."""
    lines = []
    for role, rows in ROUTES.items():
        lines += [
            f"**{role} role** (`KARPWEB_ROLE={role}`)",
            "",
            "| path | method: who | proof | what |",
            "|---|---|---|---|",
        ]
        for row in rows:
            by_who: dict[str, list[str]] = {}
            for method, who in row.methods.items():
                by_who.setdefault(who, []).append(method)
            methods = "; ".join(f"{', '.join(ms)}: {who}" for who, ms in by_who.items())
            if row.any_method and len(by_who) == 1:
                methods = f"any it takes: {next(iter(by_who))}"
            lines.append(f"| `/{row.path}` | {methods} | {row.auth} | {row.what} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
