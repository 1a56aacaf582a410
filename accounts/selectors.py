"""Reads for the accounts pages and for the second-factor gate (accounts.middleware)."""

from datetime import datetime

from django.db.models import Q, QuerySet
from django.utils import timezone
from knox.models import AuthToken


def api_tokens_live(*, user) -> QuerySet[AuthToken]:
    """The user's tokens that still work (revoked tokens are deleted; expired ones are hidden
    here and deleted by knox when next presented)."""
    return (
        AuthToken.objects.filter(user=user)
        .filter(Q(expiry__isnull=True) | Q(expiry__gt=timezone.now()))
        .order_by("-created")
    )


def two_factor_required(*, user) -> bool:
    """Staff, superusers and the *admin* group must sign in with a second factor."""
    from .roles import is_admin

    return bool(user.is_staff or user.is_superuser or is_admin(user))


def user_has_totp(*, user) -> bool:
    return totp_enrolled_at(user=user) is not None


def totp_enrolled_at(*, user) -> datetime | None:
    """When the account's TOTP authenticator (the one it has now) was made; None without one."""
    from allauth.mfa.models import Authenticator

    return (
        Authenticator.objects.filter(user=user, type=Authenticator.Type.TOTP)
        .values_list("created_at", flat=True)
        .first()
    )


def two_factor_used(*, request, user, since: datetime | None = None) -> bool:
    """Whether this session passed `user`'s second factor (allauth records each step of a
    sign-in, re-authentication and enrolment in the session), at or after `since` when given:
    a session that passed an authenticator deleted since did not pass the one made after it."""
    from allauth.account.authentication import get_authentication_records

    after = since.timestamp() if since is not None else float("-inf")
    return any(
        r.get("method") == "mfa" and float(r.get("at", 0)) >= after
        for r in get_authentication_records(request, user)
    )


# What the gate does with a request of a signed-in account (second_factor_gate).
GATE_OPEN = "open"
GATE_SIGN_OUT = "sign out"
GATE_ENROL = "enrol"


def second_factor_gate(*, request, user) -> str:
    """The one rule for every signed-in request, whatever its path:

    - an account with an authenticator is used only from a session that passed that
      authenticator (at sign-in, at enrolment, or re-authenticating with it); any other
      session, such as one signed in with the password before the account enrolled, is
      signed out (GATE_SIGN_OUT);
    - an account whose role requires a second factor and has none must enrol (GATE_ENROL);
    - otherwise the request goes on (GATE_OPEN).

    One query (the authenticator's date), plus the role's when there is no authenticator.
    """
    enrolled_at = totp_enrolled_at(user=user)
    if enrolled_at is not None:
        if two_factor_used(request=request, user=user, since=enrolled_at):
            return GATE_OPEN
        return GATE_SIGN_OUT
    return GATE_ENROL if two_factor_required(user=user) else GATE_OPEN


def reauthenticated_recently(*, request, user) -> bool:
    """Whether this session re-authenticated within ACCOUNT_REAUTHENTICATION_TIMEOUT, and with
    the second factor when the account has an authenticator (a password re-entry made before
    it enrolled does not count)."""
    import time

    from allauth.account import app_settings as account_settings
    from allauth.account.authentication import get_authentication_records

    records = [r for r in get_authentication_records(request, user) if r.get("reauthenticated")]
    if user_has_totp(user=user):
        records = [r for r in records if r.get("method") == "mfa"]
    if not records:
        return False
    return time.time() - float(records[-1]["at"]) < account_settings.REAUTHENTICATION_TIMEOUT


def signed_in_recently(*, request, user) -> bool:
    """Whether this session signed in (or re-authenticated) within
    ACCOUNT_REAUTHENTICATION_TIMEOUT: the sign-in that sends staff and admins to enrol their
    first authenticator stands for the re-authentication allauth asks before it."""
    import time

    from allauth.account import app_settings as account_settings
    from allauth.account.authentication import get_authentication_records

    records = get_authentication_records(request, user)
    if not records:
        return False
    latest = max(float(r.get("at", 0)) for r in records)
    return time.time() - latest < account_settings.REAUTHENTICATION_TIMEOUT


# The page an account was going to when the second-factor gate sent it to enrol.
ENROLMENT_NEXT_SESSION_KEY = "mentalbench_after_enrolment"


def enrolment_next_url(*, request) -> str:
    """Where "Continue" leads once the first authenticator is enrolled: the page the account
    asked for when it was sent to enrol, else the home page."""
    from django.urls import reverse
    from django.utils.http import url_has_allowed_host_and_scheme

    wanted = request.session.get(ENROLMENT_NEXT_SESSION_KEY) or ""
    if wanted and url_has_allowed_host_and_scheme(
        wanted, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return wanted
    return reverse("home")


def can_reauthenticate(*, user) -> bool:
    """Whether the account has anything to re-authenticate with here: a password or an
    authenticator. An account that signs in only through single sign-on has neither."""
    return user.has_usable_password() or user_has_totp(user=user)


def email_in_use(*, addresses: list[str]) -> bool:
    """Whether a local account has one of `addresses`, in any case, as its own address or as
    one of allauth's (verified or not)."""
    from allauth.account.models import EmailAddress
    from django.contrib.auth import get_user_model

    wanted = Q()
    for address in addresses:
        wanted |= Q(email__iexact=address.strip())
    if not wanted:
        return False
    return (
        get_user_model().objects.filter(wanted).exists()
        or EmailAddress.objects.filter(wanted).exists()
    )


SIGNIN_LOG_SHOWN = 500


def signin_events_recent():
    """The latest sign-in attempts, newest first (the page shows at most SIGNIN_LOG_SHOWN)."""
    from .models import SignInEvent

    return SignInEvent.objects.select_related("user").order_by("-at", "-id")[:SIGNIN_LOG_SHOWN]
