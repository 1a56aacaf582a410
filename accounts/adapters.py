"""How django-allauth fits the platform's account model.

Accounts are made by admins (invites, the admin) or by a first single sign-on; nobody signs
themselves up with a password. Roles are Django groups that only an admin grants: an SSO
account starts with none, whatever the identity provider says about the person.
"""

from allauth.account.adapter import DefaultAccountAdapter
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from django.conf import settings
from django.http import HttpRequest


class AccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest) -> bool:
        # Password sign-up is closed; an SSO sign-up goes through SsoAdapter below.
        return False


class SsoAdapter(DefaultSocialAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest, sociallogin) -> bool:
        return bool(settings.SSO_OIDC_SERVER_URL)

    def save_user(self, request: HttpRequest, sociallogin, form=None):
        user = super().save_user(request, sociallogin, form)
        # Never staff, never a group: an admin decides what an SSO account may do.
        if user.is_staff or user.is_superuser or user.groups.exists():
            raise ValueError("a new SSO account must start without rights")
        return user
