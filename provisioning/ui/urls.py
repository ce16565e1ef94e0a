from django.urls import path

from provisioning.ui.views import overview, policies, spend, whatif

app_name = "provisioning"

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("policies/<str:kind>/<str:name>/", policies.policy_detail, name="policy-detail"),
    path("spend/", spend.spend_page, name="spend"),
    path("whatif/", whatif.whatif_page, name="whatif"),
]
