from django.urls import path

from provisioning.ui.views import decisions, nodes, overview, pods, policies, spend, whatif

app_name = "provisioning"

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("pods/", pods.pending, name="pods"),
    path("decisions/", decisions.decision_list, name="decisions"),
    path("decisions/<int:pk>/", decisions.decision_detail, name="decision"),
    path("nodes/", nodes.node_list, name="nodes"),
    path("nodes/<str:name>/", nodes.node_detail, name="node"),
    path("disruptions/", nodes.disruption_list, name="disruptions"),
    path("policies/<str:kind>/<str:name>/", policies.policy_detail, name="policy-detail"),
    path("spend/", spend.spend_page, name="spend"),
    path("whatif/", whatif.whatif_page, name="whatif"),
]
