from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from . import views

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

# A restarting database or cache answers 503 "retrying" instead of a 500 page (views.py).
handler500 = "mentalbench.views.server_error"
