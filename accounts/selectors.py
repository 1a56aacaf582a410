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
