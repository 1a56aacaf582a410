"""How django-allauth fits the platform's account model.

Accounts are made by admins (invites, the admin) or by a first single sign-on; nobody signs
themselves up with a password. Roles are Django groups that only an admin grants: an SSO
account starts with none, whatever the identity provider says about the person. An SSO identity
joins an existing account only when that account's owner links it from a session that has just
re-authenticated (allauth asks, SOCIALACCOUNT_REAUTHENTICATION_REQUIRED), never by e-mail.
"""

from allauth.account.adapter import DefaultAccountAdapter
from allauth.account.adapter import get_adapter as get_account_adapter
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from allauth.socialaccount.providers.base import AuthProcess
from django.conf import settings
from django.core.exceptions import ValidationError
from django.http import HttpRequest
from django.shortcuts import render

from .selectors import email_in_use, signed_in_recently, user_has_totp
from .users import username_clean


class AccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest) -> bool:
        # Password sign-up is closed; an SSO sign-up goes through SsoAdapter below.
        return False

    def clean_username(self, username: str, shallow: bool = False) -> str:
        """The invites' username rule for the names allauth makes (a first SSO sign-in takes
        the provider's preferred username, or one built from it): NFKC, no look-alike of an
        existing name. allauth tries another candidate when one is refused."""
        username = super().clean_username(username, shallow=shallow)
        try:
            return username_clean(username=username)
        except ValueError as exc:
            raise ValidationError(str(exc)) from None

    def get_reauthentication_methods(self, user) -> list[dict]:
        """An account with an authenticator re-authenticates with it, never with its password
        alone: the password is what a thief of a session most likely also has. allauth offers
        both; the first method is where "re-enter" sends the browser, and the password page
        sends such an account on to the code page instead of taking the password."""
        methods = super().get_reauthentication_methods(user)
        if user.is_authenticated and user_has_totp(user=user):
            return [m for m in methods if m["id"] != "reauthenticate"]
        return methods

    def is_reauthentication_required(self, *, app: str, **kwargs) -> bool:
        """A first authenticator is enrolled right after signing in (staff and admins are sent
        there before anything else): that sign-in, minutes ago, is the re-authentication, not a
        second password prompt a second after the first. Once the account has an authenticator,
        changing it asks as allauth does."""
        required = super().is_reauthentication_required(app=app, **kwargs)
        request = self.request
        if required and app == "allauth.mfa" and request is not None:
            user = request.user
            if (
                user.is_authenticated
                and not user_has_totp(user=user)
                and signed_in_recently(request=request, user=user)
            ):
                return False
        return required


class SsoAdapter(DefaultSocialAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest, sociallogin) -> bool:
        return bool(settings.SSO_OIDC_SERVER_URL)

    def pre_social_login(self, request: HttpRequest, sociallogin) -> None:
        """Between the identity provider's answer and allauth acting on it."""
        if sociallogin.state.get("process") == AuthProcess.CONNECT:
            user = request.user
            # allauth treats an account with nothing to re-authenticate with (SSO only, no
            # authenticator) as re-authenticated: its session alone would link a second
            # identity, whoever holds the cookie. Such an account links nothing itself.
            if user.is_authenticated and not get_account_adapter().get_reauthentication_methods(
                user
            ):
                raise ImmediateHttpResponse(
                    render(request, "accounts/sso_link_refused.html", status=403)
                )
            return
        if sociallogin.is_existing:
            return
        addresses = [a.email for a in sociallogin.email_addresses if a.email]
        if sociallogin.user is not None and sociallogin.user.email:
            addresses.append(sociallogin.user.email)
        if email_in_use(addresses=addresses):
            # A new identity whose address a local account has: not joined (whoever controls
            # an address at the provider would take the account), not a second account with
            # the same address, and not allauth's sign-up form (the platform has none).
            raise ImmediateHttpResponse(
                render(
                    request,
                    "accounts/sso_email_in_use.html",
                    {"provider": sociallogin.provider.name},
                    status=409,
                )
            )

    def save_user(self, request: HttpRequest, sociallogin, form=None):
        user = super().save_user(request, sociallogin, form)
        # Never staff, never a group: an admin decides what an SSO account may do.
        if user.is_staff or user.is_superuser or user.groups.exists():
            raise ValueError("a new SSO account must start without rights")
        return user
