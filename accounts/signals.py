"""The sign-in log is written from Django's auth signals, whichever page signed the user in."""

from allauth.mfa.signals import authenticator_added
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver

from .services import signin_event_record


@receiver(user_logged_in)
def _logged_in(sender, request, user, **kwargs) -> None:
    if request is not None:
        signin_event_record(request=request, user=user, username=user.get_username(), ok=True)


@receiver(user_login_failed)
def _login_failed(sender, credentials, request=None, **kwargs) -> None:
    if request is not None:
        username = str(credentials.get("username") or credentials.get("login") or "")
        signin_event_record(request=request, user=None, username=username, ok=False)


@receiver(authenticator_added)
def _totp_enrolled(sender, request, user, authenticator, **kwargs) -> None:
    # Enrolling takes a valid code from the new authenticator: this session has just passed the
    # second factor, so it is not signed out for lacking one, and it has just re-authenticated
    # with it (the recovery codes page, shown next, asks for that).
    if request is not None and authenticator.type == authenticator.Type.TOTP:
        from allauth.account.internal.flows.login import record_authentication

        record_authentication(
            request, user, "mfa", type="totp", enrolled=True, reauthenticated=True
        )
