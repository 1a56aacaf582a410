"""How django-allauth fits the platform's account model.

Accounts are made by admins (invites, the admin) or by a first single sign-on; nobody signs
themselves up with a password. Roles are Django groups that only an admin grants: an SSO
account starts with none, whatever the identity provider says about the person.
"""

from allauth.account.adapter import DefaultAccountAdapter
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from django.conf import settings
from django.http import HttpRequest

from .selectors import user_has_totp


class AccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest) -> bool:
        # Password sign-up is closed; an SSO sign-up goes through SsoAdapter below.
        return False

    def get_reauthentication_methods(self, user) -> list[dict]:
        """An account with an authenticator re-authenticates with it, never with its password
        alone: the password is what a thief of a session most likely also has. allauth offers
        both; the first method is where "re-enter" sends the browser, and the password page
        sends such an account on to the code page instead of taking the password."""
        methods = super().get_reauthentication_methods(user)
        if user.is_authenticated and user_has_totp(user):
            return [m for m in methods if m["id"] != "reauthenticate"]
        return methods


class SsoAdapter(DefaultSocialAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest, sociallogin) -> bool:
        return bool(settings.SSO_OIDC_SERVER_URL)

    def save_user(self, request: HttpRequest, sociallogin, form=None):
        user = super().save_user(request, sociallogin, form)
        # Never staff, never a group: an admin decides what an SSO account may do.
        if user.is_staff or user.is_superuser or user.groups.exists():
            raise ValueError("a new SSO account must start without rights")
        return user
