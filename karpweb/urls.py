"""The web role's URLs: the dashboard, the REST API, sign-in, the admin site, health and
metrics. The admission webhook is not among them: only the webhook role serves it
(karpweb/urls_webhook.py). Who may call each is in provisioning/ui/access.py."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.decorators.http import require_safe

from provisioning import health
from provisioning.observability.views import metrics
from provisioning.ui.access import no_role

urlpatterns = [
    path("", include("provisioning.ui.urls")),
    path("api/", include("provisioning.rest.urls")),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics, name="metrics"),
    # Only the methods a browser uses: no OPTIONS listing, no PUT that posts the form.
    path("accounts/login/", auth_views.LoginView.as_view(http_method_names=["get", "head", "post"]), name="login"),
    path("accounts/no-role/", require_safe(no_role), name="no-role"),
    path("accounts/logout/", auth_views.LogoutView.as_view(http_method_names=["post"]), name="logout"),
    path("admin/", admin.site.urls),
]

# A missing role is explained: what is missing and who can grant it.
handler403 = "provisioning.ui.access.permission_denied"
