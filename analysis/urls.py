from django.urls import path

from . import views
from .jobs.views import job_cancel_view, job_detail, job_download, job_list
from .judge_assisted.views import judge_assisted_dashboard
from .release_views import release_page, release_start

app_name = "analysis"

urlpatterns = [
    path("", views.study_list, name="study_list"),
    path("studies/<int:study_id>/", views.dashboard, name="dashboard"),
    path(
        "studies/<int:study_id>/judge-assisted/",
        judge_assisted_dashboard,
        name="judge_assisted",
    ),
    path("studies/<int:study_id>/tables/<slug:name>.csv", views.table_csv, name="table_csv"),
    path("studies/<int:study_id>/ratings.csv", views.ratings_csv, name="ratings_csv"),
    path(
        "studies/<int:study_id>/final-scores.csv", views.final_scores_csv, name="final_scores_csv"
    ),
    path("studies/<int:study_id>/retest/", views.retest, name="retest"),
    path("studies/<int:study_id>/release/", release_page, name="release"),
    path("studies/<int:study_id>/release/start", release_start, name="release_start"),
    path("jobs/", job_list, name="jobs"),
    path("jobs/<uuid:job_id>/", job_detail, name="job"),
    path("jobs/<uuid:job_id>/cancel", job_cancel_view, name="job_cancel"),
    path("jobs/<uuid:job_id>/download", job_download, name="job_download"),
    path("distortions/kappa-f1/", views.kappa_f1, name="kappa_f1"),
    path("distortions/<int:study_id>/", views.distortion_dashboard, name="distortions"),
    path(
        "distortions/<int:study_id>/tables/<slug:name>.csv",
        views.distortion_table_csv,
        name="distortion_table_csv",
    ),
    path(
        "distortions/<int:study_id>/runs/<int:run_id>/labels.csv",
        views.distortion_labels_csv,
        name="distortion_labels_csv",
    ),
]
