from csp.decorators import csp_update
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import SimpleRouter

from provisioning.rest import catalog, cluster, errors, plans, policies

router = SimpleRouter()
router.register("pods", cluster.PodViewSet, basename="pod")
router.register("nodeclaims", cluster.NodeClaimViewSet, basename="nodeclaim")
router.register("nodes", cluster.NodeViewSet, basename="node")
router.register("decisions", cluster.DecisionViewSet, basename="decision")
router.register("disruptions", cluster.DisruptionViewSet, basename="disruption")

v1 = [
    path("nodepools/", policies.NodePoolList.as_view(), name="nodepool-list"),
    path("nodepools/<str:name>/", policies.NodePoolDetail.as_view(), name="nodepool-detail"),
    path("nodepools/<str:name>/scale/", policies.NodePoolScale.as_view(), name="nodepool-scale"),
    path("ec2nodeclasses/", policies.EC2NodeClassList.as_view(), name="ec2nodeclass-list"),
    path("ec2nodeclasses/<str:name>/", policies.EC2NodeClassDetail.as_view(), name="ec2nodeclass-detail"),
    path("nodeoverlays/", policies.NodeOverlayList.as_view(), name="nodeoverlay-list"),
    path("nodeoverlays/<str:name>/", policies.NodeOverlayDetail.as_view(), name="nodeoverlay-detail"),
    path("simulate/", plans.Simulate.as_view(), name="simulate"),
    path("simulate/disruption/", plans.SimulateDisruption.as_view(), name="simulate-disruption"),
    path("spend/", plans.Spend.as_view(), name="spend"),
    path("catalog/instancetypes/", catalog.InstanceTypes.as_view(), name="instancetype-list"),
    path("", include(router.urls)),
    re_path(r"^", errors.not_found),  # any other API path (even with a newline) gets a Status, not HTML
]

urlpatterns = [
    path("v1/", include((v1, "api"), namespace="v1")),
    # GET and HEAD only: OPTIONS would describe a view that has nothing to describe.
    path("schema/", SpectacularAPIView.as_view(http_method_names=["get", "head"]), name="schema"),
    # Swagger UI sets inline styles; its scripts still come from this origin only.
    path(
        "docs/",
        csp_update({"style-src": ["'unsafe-inline'"]})(
            SpectacularSwaggerSplitView.as_view(url_name="schema", http_method_names=["get", "head"])
        ),
        name="docs",
    ),
]
