from django.urls import path

from . import views

app_name = "judging"

urlpatterns = [
    path("", views.runs, name="runs"),
    path("runs/new/judge/", views.judge_new, name="judge_new"),
    path("runs/new/generation/", views.generation_new, name="generation_new"),
    path("runs/new/labelling/", views.labelling_new, name="labelling_new"),
    path("runs/preview/<str:kind>/", views.preview, name="preview"),
    path("runs/<int:pk>/", views.run_detail, name="run"),
    path("runs/<int:pk>/cancel", views.run_cancel, name="run_cancel"),
    path("runs/<int:pk>/resume", views.run_resume, name="run_resume"),
    path("runs/<int:pk>/retry", views.run_retry, name="run_retry"),
]
