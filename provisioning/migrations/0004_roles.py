"""The dashboard's roles as groups: viewer, editor, admin (see provisioning.ui.access)."""

from django.db import migrations

ROLES = ("viewer", "editor", "admin")
# Admins manage users and API tokens in the admin site; these are the permissions it needs.
ADMIN_PERMISSIONS = ("add_user", "change_user", "delete_user", "view_user", "view_group")


def create_roles(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for role in ROLES:
        Group.objects.get_or_create(name=role)
    # Permissions exist once auth's post_migrate ran; on a fresh database `grant` adds them.
    admin = Group.objects.get(name="admin")
    admin.permissions.add(*Permission.objects.filter(codename__in=ADMIN_PERMISSIONS))


def drop_roles(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=ROLES).delete()


class Migration(migrations.Migration):
    dependencies = [("provisioning", "0003_pipeline"), ("auth", "0012_alter_user_first_name_max_length")]
    operations = [migrations.RunPython(create_roles, drop_roles)]
