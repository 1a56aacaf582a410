"""django-allauth's two-factor forms with single-use TOTP codes (settings.MFA_FORMS).

allauth accepts a TOTP code of the periods around now (MFA_TOTP_TOLERANCE) and remembers a used
sign-in code in the cache for one period only, while the code stays valid for three; the code
typed at enrolment is not remembered at all, so it signed in again within its window. Here every
accepted code claims its time step in the database (accounts.services.totp_step_claim): a code
of a step already claimed, or of an earlier one, is refused, at sign-in, re-authentication and
enrolment alike (RFC 6238, section 5.2).
"""

from __future__ import annotations

from allauth.core.internal.cryptokit import compare_user_code
from allauth.mfa.base.forms import AuthenticateForm as AllauthAuthenticateForm
from allauth.mfa.base.forms import ReauthenticateForm as AllauthReauthenticateForm
from allauth.mfa.models import Authenticator
from allauth.mfa.totp.forms import ActivateTOTPForm as AllauthActivateTOTPForm
from allauth.mfa.totp.internal.auth import (
    format_hotp_value,
    hotp_value,
    yield_hotp_counters_from_time,
)
from allauth.mfa.utils import decrypt
from django import forms

from .services import totp_step_claim

USED_CODE = "This code was used already: wait for the next one in your app."


def totp_step_of(*, secret: str, code: str) -> int | None:
    """The time step (within the tolerance around now) whose code `code` is; None if none."""
    for step in yield_hotp_counters_from_time():
        if compare_user_code(actual=code, expected=format_hotp_value(hotp_value(secret, step))):
            return step
    return None


def _claim(*, user, secret: str, code: str) -> None:
    step = totp_step_of(secret=secret, code=code)
    if step is None or not totp_step_claim(user=user, step=step):
        raise forms.ValidationError(USED_CODE, code="used_code")


class _SingleUseCode:
    """After allauth has accepted a code: a TOTP code must also claim its step (a recovery code
    is single-use by itself)."""

    user: object
    authenticator: Authenticator

    def clean_code(self) -> str:
        code: str = super().clean_code()  # type: ignore[misc]
        if self.authenticator.type == Authenticator.Type.TOTP:
            secret = decrypt(self.authenticator.data["secret"])
            _claim(user=self.user, secret=secret, code=code)
        return code


class AuthenticateForm(_SingleUseCode, AllauthAuthenticateForm):
    """The code prompt of a sign-in."""


class ReauthenticateForm(_SingleUseCode, AllauthReauthenticateForm):
    """Re-entering the code before a sensitive change."""


class ActivateTOTPForm(AllauthActivateTOTPForm):
    """Enrolment: the code that proves the app holds the secret claims its step too."""

    def clean_code(self) -> str:
        code: str = super().clean_code()
        _claim(user=self.user, secret=self.secret, code=code)
        return code
