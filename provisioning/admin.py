from django.contrib import admin

from provisioning.models import AuditEntry, EC2NodeClass, NodeOverlay, NodePool


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
