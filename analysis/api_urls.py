from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.permissions import AllowAny
from rest_framework.routers import DefaultRouter

from . import api
from .jobs.api import JobViewSet
from .judge_assisted.api import JudgeAssistedView

router = DefaultRouter()
router.register("studies", api.StudyViewSet, basename="study")
router.register("ratings", api.RatingViewSet, basename="rating")
router.register("label-annotations", api.LabelAnnotationViewSet, basename="label-annotation")
router.register("jobs", JobViewSet, basename="job")

urlpatterns = [
    # The schema describes the API's shape only (no data), so tools may fetch it without a token.
    path(
        "schema/",
        SpectacularAPIView.as_view(permission_classes=[AllowAny], authentication_classes=[]),
        name="schema",
    ),
    # Swagger UI from drf-spectacular-sidecar's local files; the split view serves its start-up
    # code as a script of its own, which the Content-Security-Policy (script-src 'self') admits.
    path(
        "docs/",
        SpectacularSwaggerSplitView.as_view(
            url_name="schema", permission_classes=[AllowAny], authentication_classes=[]
        ),
        name="swagger-ui",
    ),
    path("studies/<int:pk>/judge-assisted/", JudgeAssistedView.as_view(), name="judge-assisted"),
    path("", include(router.urls)),
]
