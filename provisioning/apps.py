from django.apps import AppConfig


class ProvisioningConfig(AppConfig):
    name = "provisioning"
    verbose_name = "Provisioning"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        # The edge tells services how background work is sent: as Celery tasks.
        from provisioning import tasks  # noqa: F401
        from provisioning.ui.access import sync_role_groups

        # After every migrate, when every app's permissions exist: the role groups and what the
        # admin role may do in the admin site, exactly.
        post_migrate.connect(sync_role_groups, sender=self)
