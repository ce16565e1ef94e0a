from django.urls import path

from provisioning.ui import views

app_name = "provisioning"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("policies/<str:kind>/<str:name>/", views.policy_detail, name="policy-detail"),
]
