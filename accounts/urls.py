from django.urls import path

from . import views

app_name = "accounts"

urlpatterns = [
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<str:digest>/revoke", views.token_revoke, name="token_revoke"),
    path("sign-ins/", views.sign_ins, name="sign_ins"),
    # Included before allauth's URLs: this read-only page replaces allauth's e-mail page.
    path("email/", views.email, name="email"),
]
