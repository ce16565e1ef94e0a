"""Roles: viewer reads, editor also edits policies, admin also manages users and tokens;
``manage.py grant`` hands them out."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.core.management import call_command
from django.core.management.base import CommandError

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
    viewer = User.objects.create_user("v")
    superuser = User.objects.create_superuser("s", password="x")
    assert role_of(viewer) == VIEWER  # signed in, in no group
    assert has_role(viewer, VIEWER) and not has_role(viewer, EDITOR)
    assert has_role(superuser, EDITOR) and has_role(superuser, ADMIN)
    assert role_of(AnonymousUser()) is None and not has_role(AnonymousUser(), VIEWER)


def test_the_admin_link_shows_for_admins_only(client):
    grant("vic", VIEWER)
    client.force_login(User.objects.get(username="vic"))
    assert b'href="/admin/"' not in client.get("/").content
    grant("vic", ADMIN)
    client.force_login(User.objects.get(username="vic"))
    assert b'href="/admin/"' in client.get("/").content
    assert client.get("/admin/auth/user/").status_code == 200
    assert client.get("/admin/authtoken/tokenproxy/").status_code == 200  # API tokens
