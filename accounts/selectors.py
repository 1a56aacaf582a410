"""Reads for the accounts pages."""

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


def two_factor_required(user) -> bool:
    """Staff, superusers and the *admin* group must sign in with a second factor."""
    from annotation.roles import is_admin

    return bool(user.is_staff or user.is_superuser or is_admin(user))


def user_has_totp(user) -> bool:
    from allauth.mfa.models import Authenticator

    return Authenticator.objects.filter(user=user, type=Authenticator.Type.TOTP).exists()


def two_factor_used(request, user) -> bool:
    """Whether `user`'s sign-in in this session passed a second factor (allauth records each
    step of a sign-in in the session)."""
    from allauth.account.authentication import get_authentication_records

    return any(r.get("method") == "mfa" for r in get_authentication_records(request, user))


SIGNIN_LOG_SHOWN = 500


def signin_events_recent():
    """The latest sign-in attempts, newest first (the page shows at most SIGNIN_LOG_SHOWN)."""
    from .models import SignInEvent

    return SignInEvent.objects.select_related("user").order_by("-at", "-id")[:SIGNIN_LOG_SHOWN]
