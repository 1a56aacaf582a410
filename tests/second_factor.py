"""Signing privileged accounts in with a second factor, in tests.

Staff and the *admin* group may use the platform only in a session that passed a second factor,
and any account with an authenticator only in a session that passed it
(accounts.middleware.TwoFactorRequiredMiddleware). Django's `Client.force_login` makes a session
without one, so conftest wraps it: for a privileged account it enrols a TOTP authenticator (as
the enrolment page would), and for every account with one it records in the session that the
code was given (as allauth's sign-in does after a correct code). The middleware itself stays on;
`force_login_password_only` makes the session a password-only sign-in would, to test that it is
refused.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.http import HttpRequest
from django.test import Client

TEST_TOTP_SECRET = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"

force_login_password_only = Client.force_login


def totp_enrol(user, secret: str = TEST_TOTP_SECRET):
    """A TOTP authenticator for `user` (none is made twice)."""
    from allauth.mfa.models import Authenticator
    from allauth.mfa.totp.internal.auth import TOTP

    existing = Authenticator.objects.filter(user=user, type=Authenticator.Type.TOTP).first()
    return existing or TOTP.activate(user, secret).instance


def totp_code(secret: str = TEST_TOTP_SECRET, *, at: float | None = None) -> str:
    from allauth.mfa.totp.internal.auth import format_hotp_value, hotp_value

    counter = int(at if at is not None else time.time()) // 30
    return format_hotp_value(hotp_value(secret, counter))


def session_record_second_factor(client: Client, user) -> None:
    from allauth.account.internal.flows.login import record_authentication

    request = HttpRequest()
    request.session = client.session
    record_authentication(request, user, "password", username=user.get_username())
    record_authentication(request, user, "mfa", type="totp")
    request.session.save()
    client.cookies[settings.SESSION_COOKIE_NAME] = request.session.session_key


def force_login_with_second_factor(self: Client, user, backend=None) -> None:
    force_login_password_only(self, user, backend)
    from accounts.selectors import two_factor_required, user_has_totp

    if two_factor_required(user=user):
        totp_enrol(user)
    if user_has_totp(user=user):
        session_record_second_factor(self, user)


def browser_sign_in(page, username: str, password: str, *, second_factor: bool = False) -> None:
    """Sign in through the pages, as a person does (Playwright `page` with its base URL); with
    `second_factor`, give the tests' TOTP code on the page that asks for it (enrol the account
    first: `totp_enrol`). Without it, a staff or admin account is sent to enrol one."""
    page.goto("/accounts/login/")
    page.fill("#id_login", username)
    page.fill("#id_password", password)
    with page.expect_navigation():
        page.keyboard.press("Enter")
    if second_factor:
        page.wait_for_url("**/accounts/2fa/authenticate/**")
        page.fill("input[name=code]", totp_code())
        with page.expect_navigation():
            page.click("main button[type=submit]")
