from django.urls import path

from provisioning.ui.views import decisions, nodes, overview, pods, policies, policy_edit, spend, whatif

app_name = "provisioning"

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("pods/", pods.pending, name="pods"),
    path("decisions/", decisions.decision_list, name="decisions"),
    path("decisions/<int:pk>/", decisions.decision_detail, name="decision"),
    path("nodes/", nodes.node_list, name="nodes"),
    path("nodes/<str:name>/", nodes.node_detail, name="node"),
    path("disruptions/", nodes.disruption_list, name="disruptions"),
    path("interruptions/", nodes.interruption_list, name="interruptions"),
    path("spend/", spend.spend_page, name="spend"),
    path("whatif/", whatif.whatif_page, name="whatif"),
    path("whatif/disruption/", whatif.disruption_page, name="whatif-disruption"),
    path("policies/", policies.policy_list, name="policy-list"),
    path("policies/apply/", policy_edit.policy_apply, name="policy-apply"),
    path("policies/new/<str:kind>/", policy_edit.policy_create, name="policy-create"),
    path("policies/new/<str:kind>/validate/", policy_edit.policy_validate, name="policy-create-validate"),
    path("policies/<str:kind>/<str:name>/", policies.policy_detail, name="policy-detail"),
    path("policies/NodePool/<str:name>/replicas/", policies.policy_scale, name="policy-scale"),
    path("policies/<str:kind>/<str:name>/edit/", policy_edit.policy_edit, name="policy-edit"),
    path("policies/<str:kind>/<str:name>/validate/", policy_edit.policy_validate, name="policy-validate"),
    path("policies/<str:kind>/<str:name>/delete/", policies.policy_delete, name="policy-delete"),
    path(
        "policies/<str:kind>/<str:name>/history/<int:entry_id>/revert/",
        policy_edit.policy_revert,
        name="policy-revert",
    ),
]
