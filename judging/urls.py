from django.urls import path

from . import views

app_name = "judging"

urlpatterns = [
    path("", views.runs, name="runs"),
    path("runs/new/judge/", views.judge_new, name="judge_new"),
    path("runs/new/generation/", views.generation_new, name="generation_new"),
    path("runs/new/labelling/", views.labelling_new, name="labelling_new"),
    path("runs/preview/<str:kind>/", views.preview, name="preview"),
    path("runs/estimate/<str:kind>/", views.run_estimate, name="run_estimate"),
    path("runs/<int:pk>/", views.run_detail, name="run"),
    path("studies/<int:study_id>/runs/", views.study_runs, name="study_runs"),
    path("runs/<int:pk>/ratings.csv", views.run_ratings_csv, name="run_ratings_csv"),
    path("runs/<int:pk>/cancel", views.run_cancel, name="run_cancel"),
    path("runs/<int:pk>/resume", views.run_resume, name="run_resume"),
    path("runs/<int:pk>/retry", views.run_retry, name="run_retry"),
    path("endpoints/", views.endpoint_list, name="endpoints"),
    path("endpoints/new/", views.endpoint_new, name="endpoint_new"),
    path("endpoints/<int:pk>/", views.endpoint_edit, name="endpoint_edit"),
    path("endpoints/<int:pk>/enabled", views.endpoint_enabled, name="endpoint_enabled"),
    path("endpoints/<int:pk>/test", views.endpoint_test, name="endpoint_test"),
]
