"""The admin site: read-only policies and audit, and the admin role's users and API tokens.

An admin (the role, not a superuser) manages users and tokens but cannot make anyone a
superuser, grant permissions beyond the three roles, or touch a superuser's account or token:
nothing here lets the role raise itself or another above admin.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import Group
from rest_framework.authtoken.admin import TokenAdmin
from rest_framework.authtoken.models import TokenProxy

from provisioning.models import AuditEntry, EC2NodeClass, NodeOverlay, NodePool
from provisioning.ui.access import ADMIN, ROLES

User = get_user_model()
# Fields only a superuser sets: they grant more than the admin role holds.
SUPERUSER_ONLY = ("is_superuser", "is_staff", "user_permissions")


class ReadOnlyAdmin(admin.ModelAdmin):
    """Writes go through the policy service (validated and audited), never the admin."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(NodePool)
class NodePoolAdmin(ReadOnlyAdmin):
    list_display = ("name", "node_class_name", "weight", "generation", "updated_at")
    search_fields = ("name",)


@admin.register(EC2NodeClass)
class EC2NodeClassAdmin(ReadOnlyAdmin):
    list_display = ("name", "generation", "updated_at")
    search_fields = ("name",)


@admin.register(NodeOverlay)
class NodeOverlayAdmin(ReadOnlyAdmin):
    list_display = ("name", "weight", "generation", "updated_at")
    search_fields = ("name",)


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ("at", "kind", "name", "action", "source", "actor")
    list_filter = ("kind", "action", "source")
    search_fields = ("name", "actor")


def _superuser(request) -> bool:
    return request.user.is_active and request.user.is_superuser


admin.site.unregister(User)


@admin.register(User)
class KarpwebUserAdmin(UserAdmin):
    """Django's user admin, narrowed for the admin role: a role is one of the three groups,
    is_staff follows the admin role, and superusers are off limits."""

    list_display = ("username", "email", "is_active", "is_superuser", "role_names", "last_login")
    list_filter = ("is_active", "is_superuser", "groups")

    @admin.display(description="roles")
    def role_names(self, user) -> str:
        return ", ".join(sorted(g.name for g in user.groups.all() if g.name in ROLES))

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("groups")

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        if _superuser(request):
            return fieldsets
        return [
            (title, {**options, "fields": tuple(f for f in options["fields"] if f not in SUPERUSER_ONLY)})
            for title, options in fieldsets
        ]

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if db_field.name == "groups" and not _superuser(request):
            kwargs["queryset"] = Group.objects.filter(name__in=ROLES)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def has_change_permission(self, request, obj=None):
        if obj is not None and obj.is_superuser and not _superuser(request):
            return False  # a superuser's password, name or groups: not the admin role's to change
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        if obj is not None and obj.is_superuser and not _superuser(request):
            return False
        return super().has_delete_permission(request, obj)

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        if _superuser(request):
            return  # a superuser sets is_staff in the form
        # The admin site is for admins: is_staff follows the role, as `manage.py grant` sets it.
        user = form.instance
        staff = user.is_superuser or user.groups.filter(name=ADMIN).exists()
        if user.is_staff != staff:
            user.is_staff = staff
            user.save(update_fields=["is_staff"])


admin.site.unregister(TokenProxy)


@admin.register(TokenProxy)
class KarpwebTokenAdmin(TokenAdmin):
    """API tokens, but not a superuser's for the admin role (it would act in their name)."""

    def get_queryset(self, request):
        tokens = super().get_queryset(request)
        return tokens if _superuser(request) else tokens.exclude(user__is_superuser=True)

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "user" and not _superuser(request):
            kwargs["queryset"] = User.objects.filter(is_superuser=False)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)
