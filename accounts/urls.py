from django.urls import path

from . import views

app_name = "accounts"

urlpatterns = [
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<str:digest>/revoke", views.token_revoke, name="token_revoke"),
    path("sign-ins/", views.sign_ins, name="sign_ins"),
    # Included before allauth's URLs: this read-only page replaces allauth's e-mail page, and
    # allauth's password pages are served behind re-authentication with the second factor.
    path("email/", views.email, name="email"),
    path("password/change/", views.password_change, name="password_change"),
    path("password/set/", views.password_set, name="password_set"),
    # allauth's enrolment and recovery codes pages, saying why and leading on.
    path("2fa/totp/activate/", views.activate_totp, name="activate_totp"),
    path("2fa/recovery-codes/", views.recovery_codes, name="recovery_codes"),
]
