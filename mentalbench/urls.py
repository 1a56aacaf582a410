from allauth.account.decorators import secure_admin_login
from django.contrib import admin
from django.urls import include, path

from . import views

# Django admin's own sign-in form would sign staff in with a password alone: it sends the signed
# out to the platform's sign-in (second factor included) and refuses the signed-in non-staff.
admin.site.login = secure_admin_login(admin.site.login)  # type: ignore[method-assign]

# Under /api/ a URL that matches no endpoint answers the API's JSON error body, not a page.
handler404 = "analysis.api_contract.not_found"

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

# A restarting database or cache answers 503 "retrying" instead of a 500 page (views.py).
handler500 = "mentalbench.views.server_error"
