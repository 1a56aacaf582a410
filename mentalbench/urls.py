from django.contrib import admin
from django.urls import include, path

from . import views

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    # Browsers ask for /favicon.ico on every page whatever the <link> says: send them to the file.
    path("favicon.ico", views.favicon, name="favicon"),
    path("accounts/", include("accounts.urls")),
    # Sign-in, sign-out, forgot password, two-factor and single sign-on (django-allauth).
    path("accounts/", include("allauth.urls")),
    path("admin/", admin.site.urls),
    path("", include("annotation.urls")),
    path("analysis/", include("analysis.urls")),
    path("judging/", include("judging.urls")),
    path("api/", include("analysis.api_urls")),
]
