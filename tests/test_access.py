"""Roles: viewer reads, editor also edits policies, admin also manages users and tokens (and
no more); a signed-in user without a role sees nothing; ``manage.py grant`` hands roles out;
sign-ins are throttled per user name and per address."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import AnonymousUser, Group, Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.authtoken.models import Token

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
    client.force_login(User.objects.create_user("newcomer"))
    for path in ("/", "/pods/", "/policies/", "/spend/", "/whatif/"):
        page = client.get(path)
        assert page.status_code == 403, path
        text = page.content.decode()
        assert "You are signed in as newcomer, but you have no role in karpweb yet." in text
        assert "manage.py grant newcomer viewer" in text
        assert "<strong>ada</strong>, <strong>root</strong>" in text  # who can grant it
        assert "Pending pods" not in text  # no navigation to pages it cannot open
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
