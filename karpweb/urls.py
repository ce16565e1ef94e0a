from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from provisioning import health, webhook

urlpatterns = [
    path("", include("provisioning.ui.urls")),
    path("api/", include("provisioning.rest.urls")),
    path("webhook/validate", webhook.validate, name="webhook-validate"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
]
