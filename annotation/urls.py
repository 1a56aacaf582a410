from django.urls import path

from . import views

app_name = "annotation"

urlpatterns = [
    path("imports/", views.import_upload, name="import_upload"),
]
