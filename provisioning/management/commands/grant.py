"""``manage.py grant USER ROLE``: give a user the viewer, editor or admin role (creating the
user, with a printed password, if it does not exist), or ``none`` to take every role away."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand
from django.db import transaction

from provisioning.ui.access import ADMIN, ROLES, sync_role_groups

NONE = "none"


class Command(BaseCommand):
    help = "Give USER one role of the dashboard and API: viewer, editor or admin; none takes it away."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("role", choices=(*ROLES, NONE))

    @transaction.atomic
    def handle(self, *args, username: str, role: str, **options):
        users = get_user_model()
        user = users.objects.filter(username=username).first()
        if user is None:
            password = secrets.token_urlsafe(12)
            user = users.objects.create_user(username=username, password=password)
            self.stdout.write(f"Created user {username} / {password}")
        sync_role_groups()
        groups = {group.name: group for group in Group.objects.filter(name__in=ROLES)}
        user.groups.remove(*groups.values())
        if role != NONE:
            user.groups.add(groups[role])
        # Admins manage users and tokens in the admin site, which needs is_staff.
        user.is_staff = role == ADMIN or user.is_superuser
        user.save(update_fields=["is_staff"])
        said = f"{username} is now {role}" if role != NONE else f"{username} has no role"
        self.stdout.write(self.style.SUCCESS(said))
