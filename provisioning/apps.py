from django.apps import AppConfig


class ProvisioningConfig(AppConfig):
    name = "provisioning"
    verbose_name = "Provisioning"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The edge tells services how background work is sent: as Celery tasks.
        from provisioning import tasks  # noqa: F401
