"""Roles: viewer reads, editor also edits policies, admin also manages users and tokens (and
no more); a signed-in user without a role sees nothing; ``manage.py grant`` hands roles out;
sign-ins are throttled per user name and per address."""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

import pytest
from django.contrib.auth.models import AnonymousUser, Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import URLPattern, URLResolver
from rest_framework.authtoken.models import Token

from provisioning.models import AuditEntry
from provisioning.ui import access
from provisioning.ui.access import ADMIN, EDITOR, VIEWER, has_role, role_of

pytestmark = pytest.mark.django_db


def grant(username: str, role: str) -> str:
    out = io.StringIO()
    call_command("grant", username, role, stdout=out)
    return out.getvalue()


def test_grant_creates_the_user_once_and_sets_one_role():
    printed = grant("erin", EDITOR)
    assert "Created user erin / " in printed and "erin is now editor" in printed
    user = User.objects.get(username="erin")
    assert role_of(user) == EDITOR and not user.is_staff
    assert "Created user" not in grant("erin", VIEWER)
    user = User.objects.get(username="erin")
    assert list(user.groups.values_list("name", flat=True)) == [VIEWER]


def test_admins_are_staff_with_the_user_permissions():
    grant("ada", ADMIN)
    user = User.objects.get(username="ada")
    assert user.is_staff and role_of(user) == ADMIN
    assert user.has_perm("auth.change_user") and user.has_perm("auth.add_user")
    assert user.has_perm("authtoken.add_tokenproxy") and user.has_perm("authtoken.delete_tokenproxy")


def test_grant_refuses_an_unknown_role():
    with pytest.raises(CommandError, match="invalid choice: 'owner'"):
        call_command("grant", "x", "owner")


def test_ranks():
    nobody = User.objects.create_user("n")
    viewer = User.objects.create_user("v")
    viewer.groups.add(Group.objects.get(name=VIEWER))
    superuser = User.objects.create_superuser("s", password="x")
    assert role_of(nobody) is None and not has_role(nobody, VIEWER)  # signed in, in no group: no role
    assert role_of(viewer) == VIEWER
    assert has_role(viewer, VIEWER) and not has_role(viewer, EDITOR)
    assert has_role(superuser, EDITOR) and has_role(superuser, ADMIN)
    assert role_of(AnonymousUser()) is None and not has_role(AnonymousUser(), VIEWER)


def test_grant_none_takes_every_role_away():
    grant("ada", ADMIN)
    assert "ada has no role" in grant("ada", "none")
    user = User.objects.get(username="ada")
    assert role_of(user) is None and not user.is_staff and not user.groups.exists()


# ------------------------------------------------------------------ no role, no access


def test_a_user_without_a_role_sees_nothing_and_is_told_who_can_grant_one(client):
    grant("ada", ADMIN)
    User.objects.create_superuser("root", password="x")
    newcomer = User.objects.create_user("newcomer")
    client.force_login(newcomer)
    for path in ("/", "/pods/", "/policies/", "/spend/", "/whatif/", "/policies/NodePool/x/edit/"):
        sent = client.get(path)
        assert sent.status_code == 302 and sent["Location"] == f"/accounts/no-role/?next={path}", path
        page = client.get(sent["Location"])
        assert page.status_code == 200, path
        text = page.content.decode()
        assert "You are signed in as newcomer, but you have no role in karpweb yet." in text
        assert "manage.py grant newcomer viewer" in text
        assert "<strong>ada</strong>, <strong>root</strong>" in text  # who can grant it
        assert "Pending pods" not in text  # no navigation to pages it cannot open
    # Once granted, the same page sends them on to where they were going (never off this site).
    grant("newcomer", VIEWER)
    assert client.get("/accounts/no-role/?next=/pods/")["Location"] == "/pods/"
    assert client.get("/accounts/no-role/?next=https://evil.example/")["Location"] == "/"
    grant("newcomer", "none")
    api = client.get("/api/v1/nodepools/", HTTP_ACCEPT="application/json")
    assert api.status_code == 403
    assert api.json()["message"].startswith("You are signed in as newcomer, but you have no role in karpweb yet.")


def test_a_missing_role_is_named(client):
    grant("vic", VIEWER)
    client.force_login(User.objects.get(username="vic"))
    page = client.get("/policies/new/NodePool/?starter=general-purpose")
    assert page.status_code == 403
    assert "This needs the editor role; you are a viewer." in page.content.decode()


# ------------------------------------------------------------------ what an admin may do to users


@pytest.fixture
def admin_role(client):
    grant("ada", ADMIN)
    ada = User.objects.get(username="ada")
    client.force_login(ada)
    return ada


def change_form(client, user) -> dict:
    """What the admin's change form for ``user`` posts back unchanged: every field it shows."""
    page = client.get(f"/admin/auth/user/{user.pk}/change/")
    assert page.status_code == 200
    form = page.context["adminform"].form
    data: dict = {}
    for bound in form:
        if bound.name == "password":
            continue
        value = bound.value()
        widget = bound.field.widget
        if hasattr(widget, "widgets"):  # a date and a time
            for index, part in enumerate(widget.decompress(value)):
                data[f"{bound.html_name}_{index}"] = "" if part is None else str(part)
        elif isinstance(value, list):
            data[bound.html_name] = value
        elif isinstance(value, bool):
            if value:
                data[bound.html_name] = "on"
        elif value is not None:
            data[bound.html_name] = value
    return data


def test_an_admin_manages_roles_but_cannot_make_a_superuser(client, admin_role):
    grant("vic", VIEWER)
    vic = User.objects.get(username="vic")
    data = change_form(client, vic)
    assert not {"is_superuser", "is_staff", "user_permissions"} & set(data)  # not in the admin role's form
    form = client.get(f"/admin/auth/user/{vic.pk}/change/").context["adminform"].form
    assert {g.name for g in form.fields["groups"].queryset} == {VIEWER, EDITOR, ADMIN}
    # A forged post naming superuser and every permission changes the role, and only the role.
    editor = Group.objects.get(name=EDITOR)
    forged = {**data, "groups": [editor.pk], "is_superuser": "on", "is_staff": "on"}
    forged["user_permissions"] = [p.pk for p in Permission.objects.all()[:20]]
    response = client.post(f"/admin/auth/user/{vic.pk}/change/", forged)
    assert response.status_code == 302, response.content.decode()[:2000]
    vic.refresh_from_db()
    assert role_of(vic) == EDITOR
    assert not vic.is_superuser and not vic.is_staff and not vic.user_permissions.exists()


def test_an_admin_cannot_raise_itself(client, admin_role):
    data = change_form(client, admin_role)
    forged = {**data, "is_superuser": "on", "user_permissions": [p.pk for p in Permission.objects.all()]}
    assert client.post(f"/admin/auth/user/{admin_role.pk}/change/", forged).status_code == 302
    admin_role.refresh_from_db()
    assert not admin_role.is_superuser and not admin_role.user_permissions.exists()
    assert role_of(admin_role) == ADMIN and admin_role.is_staff
    # Nor give its role more: the groups are the admin site's to view only.
    group = Group.objects.get(name=ADMIN)
    assert client.get(f"/admin/auth/group/{group.pk}/change/").status_code == 200  # read-only view
    before = set(group.permissions.values_list("codename", flat=True))
    client.post(f"/admin/auth/group/{group.pk}/change/", {"name": ADMIN, "permissions": [1, 2, 3]})
    assert set(group.permissions.values_list("codename", flat=True)) == before
    assert client.get("/admin/auth/group/add/").status_code == 403


def test_superusers_and_their_tokens_are_out_of_an_admins_reach(client, admin_role):
    root = User.objects.create_superuser("root", password="an-old-password")
    token = Token.objects.create(user=root)
    for url in (
        f"/admin/auth/user/{root.pk}/password/",
        f"/admin/auth/user/{root.pk}/delete/",
    ):
        assert client.get(url).status_code == 403, url
    assert client.post(f"/admin/auth/user/{root.pk}/password/", {"password1": "x" * 20}).status_code == 403
    root.refresh_from_db()
    assert root.check_password("an-old-password")
    change = client.get(f"/admin/auth/user/{root.pk}/change/")
    assert change.status_code == 200 and not change.context["has_change_permission"]  # shown, not editable
    tokens = client.get("/admin/authtoken/tokenproxy/").content.decode()
    assert token.key not in tokens
    assert client.get(f"/admin/authtoken/tokenproxy/{root.pk}/change/").status_code == 302  # not found: back
    add = client.get("/admin/authtoken/tokenproxy/add/")
    assert root not in add.context["adminform"].form.fields["user"].queryset
    assert client.post("/admin/authtoken/tokenproxy/add/", {"user": root.pk}).status_code == 200  # refused
    assert Token.objects.filter(user=root).count() == 1


def test_a_superuser_still_sets_everything(client):
    root = User.objects.create_superuser("root", password="x")
    client.force_login(root)
    grant("vic", VIEWER)
    vic = User.objects.get(username="vic")
    data = change_form(client, vic)
    assert {"is_superuser", "is_staff", "user_permissions"} <= set(client.get(
        f"/admin/auth/user/{vic.pk}/change/"
    ).context["adminform"].form.fields)
    assert client.post(f"/admin/auth/user/{vic.pk}/change/", {**data, "is_superuser": "on"}).status_code == 302
    vic.refresh_from_db()
    assert vic.is_superuser


# ------------------------------------------------------------------ sign-in throttling


def sign_in(client, username: str, password: str, address: str = "10.1.1.1", forwarded: str | None = None):
    extra = {"REMOTE_ADDR": address}
    if forwarded is not None:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    return client.post("/accounts/login/", {"username": username, "password": password}, **extra)


def test_failed_sign_ins_lock_the_user_name_from_every_address(client, settings):
    settings.AXES_FAILURE_LIMIT = 3
    User.objects.create_user("vic", password="the-right-password")
    for n in range(2):
        assert sign_in(client, "vic", "wrong", address=f"10.1.1.{n}").status_code == 200  # the form again
    assert sign_in(client, "vic", "wrong", address="10.1.1.2").status_code == 429  # the third: locked
    locked = sign_in(client, "vic", "the-right-password", address="10.9.9.9")
    assert locked.status_code == 429
    assert "Too many failed sign-ins" in locked.content.decode() and "15 minutes" in locked.content.decode()
    assert "_auth_user_id" not in client.session
    # Another user from those addresses is not locked by vic's failures alone.
    User.objects.create_user("eve", password="eves-password")
    assert sign_in(client, "eve", "eves-password", address="10.1.1.5").status_code == 302


def test_failed_sign_ins_lock_the_address_for_every_user_name(client, settings):
    settings.AXES_FAILURE_LIMIT = 3
    User.objects.create_user("vic", password="the-right-password")
    for name in ("alice", "bob", "carol"):
        sign_in(client, name, "guess", address="10.6.6.6")
    assert sign_in(client, "vic", "the-right-password", address="10.6.6.6").status_code == 429
    assert sign_in(client, "vic", "the-right-password", address="10.7.7.7").status_code == 302


def test_behind_the_ingress_the_address_is_the_one_it_saw(client, settings):
    """X-Forwarded-For: whatever the client wrote, then the address the ingress saw (the last)."""
    settings.AXES_FAILURE_LIMIT = 3
    settings.KARPWEB_TRUSTED_PROXIES = 1
    User.objects.create_user("vic", password="the-right-password")
    for n, name in enumerate(("alice", "bob", "carol")):
        # The attacker forges a new address each time; the ingress appends the real one.
        sign_in(client, name, "guess", address="10.0.0.2", forwarded=f"192.0.2.{n}, 203.0.113.9")
    assert sign_in(client, "vic", "x", address="10.0.0.2", forwarded="198.51.100.1, 203.0.113.9").status_code == 429
    # Others behind the same ingress are not locked out with the attacker.
    ok = sign_in(client, "vic", "the-right-password", address="10.0.0.2", forwarded="198.51.100.7")
    assert ok.status_code == 302


def test_the_admin_sites_sign_in_is_throttled_too(client, settings):
    settings.AXES_FAILURE_LIMIT = 2
    User.objects.create_superuser("root", password="root-password")
    for _ in range(2):
        client.post("/admin/login/", {"username": "root", "password": "nope"})
    assert client.post("/admin/login/", {"username": "root", "password": "root-password"}).status_code == 429


def test_the_admin_link_shows_for_admins_only(client):
    grant("vic", VIEWER)
    client.force_login(User.objects.get(username="vic"))
    assert b'href="/admin/"' not in client.get("/").content
    grant("vic", ADMIN)
    client.force_login(User.objects.get(username="vic"))
    assert b'href="/admin/"' in client.get("/").content
    assert client.get("/admin/auth/user/").status_code == 200
    assert client.get("/admin/authtoken/tokenproxy/").status_code == 200  # API tokens


# ------------------------------------------------------------------ the access matrix
#
# Every route of both URLconfs, every HTTP method, each kind of caller, against the table in
# provisioning/ui/access.py. A route without a row, a row without a route, a method a route
# answers that its row does not list, or any answer the row does not predict fails here.

METHODS = access.ALL
REVIEW_UID = "5f4c3b2a-0000-4000-8000-000000000001"


@dataclass(frozen=True)
class Caller:
    name: str
    role: str | None = None  # the role the user holds (None: none, or no user)
    session: bool = False  # signed in through the login page
    token: bool = False  # Authorization: Token KEY
    bearer: bool = False  # Authorization: Bearer KARPWEB_METRICS_TOKEN


CALLERS = (
    Caller("anonymous"),
    Caller("no role", session=True),
    Caller("viewer", VIEWER, session=True),
    Caller("editor", EDITOR, session=True),
    Caller("admin", ADMIN, session=True),
    Caller("viewer token", VIEWER, token=True),
    Caller("editor token", EDITOR, token=True),
    Caller("admin token", ADMIN, token=True),
    Caller("no-role token", token=True),
    Caller("API server"),  # the webhook's caller: an AdmissionReview, no credentials
    Caller("Prometheus", bearer=True),
)
METRICS_TOKEN = "a-metrics-token-of-at-least-32-characters"
ALLOWED, LOGIN, ADMIN_LOGIN = "allowed", "redirect to /accounts/login/", "redirect to /admin/login/"
NO_ROLE = "redirect to /accounts/no-role/"
_RANK = {VIEWER: 0, EDITOR: 1, ADMIN: 2}


def normalise(route: str) -> str:
    """A URLconf route as the table spells it: regex groups as <name>, anchors dropped; a
    pattern that takes whatever is left of the path is <anything else>."""
    prefix, _, rest = route.partition("^") if "^" in route else (route, "", "")
    if route.endswith("^"):
        return prefix + "<anything else>"
    path = prefix + rest
    path = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"<\1>", path)
    return path.replace("$", "")


def walk(patterns, prefix: str = "") -> list[str]:
    routes = []
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            routes += walk(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            assert isinstance(pattern, URLPattern)
            routes.append(normalise(prefix + str(pattern.pattern)))
    return routes


def routes_of(role: str) -> list[str]:
    return walk(import_module(URLCONFS[role]).urlpatterns)


URLCONFS = {"web": "karpweb.urls", "webhook": "karpweb.urls_webhook"}


@pytest.mark.parametrize("role", URLCONFS)
def test_every_route_has_a_row_and_every_row_a_route(role, settings):
    assert settings.URLCONFS == URLCONFS
    routes = routes_of(role)
    missing = [r for r in routes if access.route_for(role, r) is None]
    assert not missing, f"routes of the {role} role without a row in provisioning/ui/access.py: {missing}"
    rows = [row for row in access.ROUTES[role] if row is not access.STATIC]
    unused = [row.path for row in rows if not any(row.covers(r) for r in routes)]
    assert not unused, f"rows of the {role} role that no route of its URLconf has: {unused}"
    assert len(routes) == len(set(routes)), "two routes spelled alike"


def test_the_roles_serve_apart():
    web, webhook = routes_of("web"), routes_of("webhook")
    assert "webhook/validate" not in web
    assert set(webhook) == {"webhook/validate", "healthz", "readyz"}  # its metrics: a port of their own


def expected(row: access.Route, method: str, caller: Caller) -> str:
    """The answer the table gives ``caller`` for ``method`` on ``row``."""
    who = row.methods[method]
    if who in (access.ANYONE, access.API_SERVER):  # the API server proves nothing in the request
        return ALLOWED
    if row.auth == access.BEARER:
        return ALLOWED if caller.bearer else "401"
    if row.auth == access.ADMIN_SITE:
        return ALLOWED if caller.session and caller.role == ADMIN else ADMIN_LOGIN
    if row.auth == access.PAGE:
        if not caller.session:
            return LOGIN
        if who == access.SIGNED_IN:
            return ALLOWED
        if caller.role is None:
            return NO_ROLE
        return ALLOWED if _RANK[caller.role] >= _RANK[who] else "403"
    has_role = caller.role is not None and _RANK[caller.role] >= _RANK[who]
    assert row.auth == access.API, row
    if not (caller.session or caller.token):
        return "401"
    return ALLOWED if has_role else "403"


def answer(response, row: access.Route) -> str:
    location = response.get("Location", "") if response.status_code in (301, 302) else ""
    if location.startswith("/accounts/login/?next="):  # login_required's (a sign-out's has no next)
        return LOGIN
    if location.startswith("/accounts/no-role/?next="):
        return NO_ROLE
    if location.startswith("/admin/login/"):
        return ADMIN_LOGIN
    user = getattr(response.wsgi_request, "user", None)  # none where the role has no sessions
    staff = user is not None and user.is_staff
    if row.auth == access.ADMIN_SITE and location == "/admin/" and not staff:
        return ADMIN_LOGIN  # the admin site's sign-out sends whoever is not let in to its front door
    if response.status_code in (401, 403, 405):
        # Inside the admin site, an admin meets the site's own model permissions (a read-only
        # model's add page): still let in, as the row says.
        if response.status_code == 403 and row.auth == access.ADMIN_SITE and staff:
            return ALLOWED
        return str(response.status_code)
    return ALLOWED


@pytest.fixture
def world(db, settings, seed_nodepool, seed_ec2nodeclass):
    """Something behind every parameter, so an allowed caller mostly meets real objects."""
    from uipages import add_decision, add_disruption, add_node, add_pod

    from provisioning.services.policy import apply_manifest

    settings.KARPWEB_METRICS_TOKEN = METRICS_TOKEN
    settings.KARPWEB_API_RATE = "100000/minute"
    apply_manifest(seed_ec2nodeclass, source="cli")
    apply_manifest(seed_nodepool, source="cli")
    decision = add_decision(["default/web-0"])
    claim = add_node("general", decision=decision)
    disruption = add_disruption([claim.name])
    pod = add_pod("web-0", node="general")
    users = {}
    for caller in CALLERS:
        if caller.session or caller.token:
            user = User.objects.create_user(caller.name.replace(" ", "-"))
            if caller.role:
                grant(user.username, caller.role)
                user.refresh_from_db()
            users[caller.name] = user
    samples = {
        "kind": "NodePool",
        "name": "general",
        "key": f"{pod.namespace}/{pod.name}",
        "pk": str(decision.pk),
        "entry_id": str(AuditEntry.objects.filter(name="general").latest("id").pk),
        "object_id": str(users["viewer"].pk),
        "id": str(users["viewer"].pk),
        "content_type_id": str(ContentType.objects.get_for_model(User).pk),
        "app_label": "auth",
        "url": "no-such-page/",
        "anything else": "no-such-endpoint/",
    }

    def url(path: str) -> str:
        values = dict(samples)
        if path.startswith("api/v1/disruptions/"):
            values["pk"] = str(disruption.pk)
        if path.startswith("api/v1/nodeclaims/"):
            values["name"] = claim.name
        return "/" + re.sub(r"<(?:\w+:)?([\w ]+)>", lambda m: values[m.group(1)], path)

    return users, url


def request(client: Client, caller: Caller, method: str, url: str, user, token: str | None):
    headers = {}
    if caller.token:
        headers["HTTP_AUTHORIZATION"] = f"Token {token}"
    if caller.bearer:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {METRICS_TOKEN}"
    if caller.session and "_auth_user_id" not in client.session:
        client.force_login(user)  # again after a route that signs out
    data, content_type = b"", "application/octet-stream"
    if caller.name == "API server" and method == "POST":
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": REVIEW_UID}}
        data, content_type = json.dumps(review).encode(), "application/json"
    return client.generic(method, url, data, content_type=content_type, **headers)


@pytest.mark.slow
@pytest.mark.parametrize("role", URLCONFS)
def test_every_answer_is_the_one_the_table_gives(role, settings, world):
    users, url = world
    if role == "webhook":
        settings.KARPWEB_ROLE, settings.ROOT_URLCONF = "webhook", settings.URLCONFS["webhook"]
        settings.MIDDLEWARE = settings.WEBHOOK_MIDDLEWARE
    clients = {caller.name: Client(raise_request_exception=False) for caller in CALLERS}
    tokens = {name: Token.objects.create(user=user).key for name, user in users.items()}
    wrong, checked = [], 0
    for path in routes_of(role):
        row = access.route_for(role, path)
        for method in METHODS:
            for caller in CALLERS:
                response = request(
                    clients[caller.name], caller, method, url(path), users.get(caller.name), tokens.get(caller.name)
                )
                checked += 1
                got = answer(response, row)
                if response.status_code >= 500:
                    wrong.append(f"{method} /{path} as {caller.name}: {response.status_code}")
                elif method in row.methods:
                    if got == "405" and row.any_method:
                        continue  # "any method it accepts": this one it accepts from nobody
                    if got != expected(row, method, caller):
                        wrong.append(
                            f"{method} /{path} as {caller.name}: {got} ({response.status_code}), "
                            f"the table says {expected(row, method, caller)}"
                        )
                elif got == ALLOWED:
                    status = response.status_code
                    wrong.append(f"{method} /{path} as {caller.name}: answered {status}, not in the table")
    assert not wrong, f"{len(wrong)} of {checked} answers differ from provisioning/ui/access.py:\n" + "\n".join(wrong)


def test_static_files_are_anyones(client):
    assert client.get("/static/css/karpweb.css").status_code == 200
    assert access.route_for("web", "static/css/karpweb.css") is access.STATIC


def test_the_readme_access_section_is_the_table():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    start, end = "<!-- access table: `manage.py access` prints it -->\n", "<!-- end of the access table -->"
    assert start in readme and end in readme, "README.md has no generated Access table"
    section = readme.split(start, 1)[1].split(end, 1)[0]
    assert section.strip() == access.markdown().strip(), "README's Access table is stale: paste `manage.py access`"
    out = io.StringIO()
    call_command("access", stdout=out)
    assert out.getvalue() == access.markdown()
