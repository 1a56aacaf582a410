"""In chromium: forgot password by e-mail, an admin enrolling TOTP and signing in with it, and a
single sign-on through the fake OpenID Connect provider."""

from __future__ import annotations

import re
import time

import pytest
from django.contrib.auth import get_user_model
from django.core import mail

from accounts.roles import ADMIN, CLINICIAN, role_add
from tests.fakes.oidc_provider import FakeOIDCProvider
from tests.second_factor import totp_code

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "a-Long-pass-9871-browser"


def sign_in(page, username: str, password: str = PASSWORD) -> None:
    page.goto("/accounts/login/")
    page.fill("#id_login", username)
    page.fill("#id_password", password)
    page.click("button:has-text('Sign in')")


def test_forgot_password_by_e_mail_end_to_end(
    django_db_setup, live_server, page, settings, celery_eager
):
    settings.SITE_URL = live_server.url  # the link in the e-mail leads to this server
    user = get_user_model().objects.create_user(
        "cleo", email="cleo@ward.example", password=PASSWORD
    )
    role_add(user=user, role=CLINICIAN)
    mail.outbox.clear()
    page.goto("/accounts/login/")
    page.click("text=Forgot password?")
    page.fill("input[name=email]", "cleo@ward.example")
    page.click("main button[type=submit]")
    page.wait_for_url("**/accounts/password/reset/done/")
    (message,) = mail.outbox
    link = re.search(r"http://[^\s]+/accounts/password/reset/key/\S+/", message.body).group(0)
    page.goto(link)
    new = "a-Fresh-pass-2468-cleo"
    page.fill("input[name=password1]", new)
    page.fill("input[name=password2]", new)
    page.click("main button[type=submit]")
    page.wait_for_url("**/accounts/password/reset/key/done/")
    sign_in(page, "cleo", new)
    page.wait_for_url(re.compile(r".*/rate/$"))
    # The link worked once.
    page.goto(link)
    assert page.locator("input[name=password1]").count() == 0


@pytest.mark.parametrize("width", [360, 1280])
def test_an_admin_enrols_totp_and_signs_in_with_it(django_db_setup, live_server, page, width):
    page.set_viewport_size({"width": width, "height": 800})
    user = get_user_model().objects.create_user("adam", password=PASSWORD)
    role_add(user=user, role=ADMIN)
    # First sign-in, in one flow: the password once, why a second factor, enrol, the codes
    # once, continue to the page asked for. No second password prompt on the way.
    page.goto("/manage/")
    page.wait_for_url("**/accounts/login/**")
    page.fill("#id_login", "adam")
    page.fill("#id_password", PASSWORD)
    page.click("button:has-text('Sign in')")
    page.wait_for_url("**/accounts/2fa/totp/activate/**")
    assert "manage studies" in page.inner_text("#why-second-factor")
    secret = page.input_value("#authenticator_secret")
    page.fill("input[name=code]", totp_code(secret))
    page.click("main button[type=submit]")
    page.wait_for_url("**/accounts/2fa/recovery-codes/**")
    assert len(page.input_value("#recovery_codes").split()) == 10
    page.check("#codes_saved")
    page.click("#continue")
    page.wait_for_url("**/manage/")
    assert page.locator("input[name=password]").count() == 0
    page.click("button:has-text('Log out')")
    page.wait_for_url("**/accounts/login/**")
    sign_in(page, "adam")
    page.wait_for_url("**/accounts/2fa/authenticate/**")
    page.fill("input[name=code]", totp_code(secret, at=time.time() + 30))
    page.click("main button[type=submit]")
    page.goto("/manage/")
    assert page.url.endswith("/manage/")


def test_single_sign_on_through_the_fake_provider(django_db_setup, live_server, page, settings):
    from mentalbench.settings import csp_admitting_sso

    with FakeOIDCProvider() as provider:
        settings.SSO_OIDC_SERVER_URL = provider.url
        settings.SOCIALACCOUNT_PROVIDERS = provider.settings()
        settings.CONTENT_SECURITY_POLICY = csp_admitting_sso(
            settings.CONTENT_SECURITY_POLICY, provider.url
        )
        page.goto("/accounts/login/")
        page.click("button:has-text('Sign in with Hospital')")
        page.wait_for_url(f"{live_server.url}/**")
        page.goto("/")
        assert page.locator(".who").inner_text() == "dr.sso"
        user = get_user_model().objects.get(username="dr.sso")
        assert not user.groups.exists() and not user.is_staff
        assert provider.token_requests and provider.token_requests[0]["code_verifier"]
