from django.urls import path

from . import views

app_name = "analysis"

urlpatterns = [
    path("", views.study_list, name="study_list"),
    path("studies/<int:study_id>/", views.dashboard, name="dashboard"),
    path("studies/<int:study_id>/tables/<slug:name>.csv", views.table_csv, name="table_csv"),
    path("studies/<int:study_id>/ratings.csv", views.ratings_csv, name="ratings_csv"),
]
