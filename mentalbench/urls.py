from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from . import views

# Under /api/ a URL that matches no endpoint answers the API's JSON error body, not a page.
handler404 = "analysis.api_contract.not_found"

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    # Browsers ask for /favicon.ico on every page whatever the <link> says: send them to the file.
    path("favicon.ico", views.favicon, name="favicon"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/", include("accounts.urls")),
    path("admin/", admin.site.urls),
    path("", include("annotation.urls")),
    path("analysis/", include("analysis.urls")),
    path("judging/", include("judging.urls")),
    path("api/", include("analysis.api_urls")),
]
