"""Staff and the admin group sign in with a second factor (TOTP, recovery codes); others may."""

from __future__ import annotations

import re
import time

import pytest
from allauth.mfa.models import Authenticator
from django.urls import reverse

from accounts.roles import ADMIN, CLINICIAN, role_add
from tests.second_factor import (
    TEST_TOTP_SECRET,
    force_login_password_only,
    totp_code,
    totp_enrol,
)

PASSWORD = "a-Long-pass-9871-admin"


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user("boss", password=PASSWORD, is_staff=True)


def sign_in(client, username: str, password: str = PASSWORD, next_path: str = ""):
    data = {"login": username, "password": password}
    if next_path:
        data["next"] = next_path
    return client.post(reverse("account_login"), data)


# Committed for real: allauth announces a new authenticator after the commit, as in production.
@pytest.mark.django_db(transaction=True)
def test_staff_without_an_authenticator_must_enrol_before_anything_else(client, staff):
    assert sign_in(client, "boss", next_path="/manage/?study=3")["Location"] == "/manage/?study=3"
    for path in ("/manage/?study=3", "/", "/analysis/", "/admin/"):
        response = client.get(path)
        assert response.status_code == 302, path
        assert response["Location"] == reverse("mfa_activate_totp"), path
    # Right after the password, enrolling asks no password again: the sign-in was minutes ago.
    page = client.get(reverse("mfa_activate_totp"))
    assert page.status_code == 200
    html = page.content.decode()
    # The page says why this account needs it, and what comes after.
    assert 'id="why-second-factor"' in html and "manage studies, launch runs" in html
    assert "recovery codes" in html
    # The enrolment page shows the secret to type into the app; a correct code enrols.
    secret = client.session["mfa.totp.secret"]
    response = client.post(reverse("mfa_activate_totp"), {"code": totp_code(secret)})
    assert response.status_code == 302 and response["Location"] == reverse(
        "mfa_view_recovery_codes"
    )
    assert Authenticator.objects.filter(user=staff, type="totp").exists()
    assert Authenticator.objects.filter(user=staff, type="recovery_codes").exists()
    # The codes, shown once, then the way on: the first page the account was going to when it
    # was sent to enrol (the last one asked for before it).
    codes_page = client.get(reverse("mfa_view_recovery_codes"))
    codes = codes_page.content.decode()
    assert 'id="recovery_codes"' in codes and 'id="codes_saved"' in codes
    assert re.search(r'<a href="/admin/" class="button" id="continue">Continue</a>', codes)
    # Continue and the codes' own links are separate actions, each an item of its own list
    # (allauth's page ran its two links together and had no way on).
    actions = re.search(r'<ul class="actions">(.*?)</ul>', codes, re.S).group(1)
    items = re.findall(r"<li><a [^>]*>([^<]+)</a></li>", actions)
    assert items == ["Continue"], items  # the codes are shown once: nothing else to do here
    # Seen again later: how many are left, and making new ones is its own action beside Continue.
    again = client.get(reverse("mfa_view_recovery_codes")).content.decode()
    actions = re.search(r'<ul class="actions">(.*?)</ul>', again, re.S).group(1)
    assert re.findall(r"<li><a [^>]*>([^<]+)</a></li>", actions) == ["Continue", "Make new codes"]
    # The session that enrolled passed the factor: the platform opens.
    assert client.get("/manage/").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_the_sign_in_stands_for_re_authentication_only_for_a_while(client, staff):
    from unittest import mock

    from allauth.account import app_settings as account_settings

    sign_in(client, "boss")
    later = time.time() + account_settings.REAUTHENTICATION_TIMEOUT + 1
    with mock.patch("time.time", return_value=later):
        response = client.get(reverse("mfa_activate_totp"))
    assert response["Location"].startswith(reverse("account_reauthenticate"))


@pytest.mark.django_db(transaction=True)
def test_changing_an_authenticator_still_asks_for_the_code(client, staff):
    totp_enrol(staff)
    sign_in(client, "boss")
    client.post(reverse("mfa_authenticate"), {"code": totp_code(TEST_TOTP_SECRET)})
    # A fresh sign-in with the code does not open deactivation without re-entering it.
    response = client.get(reverse("mfa_deactivate_totp"))
    assert response.status_code == 302 and "reauthenticate" in response["Location"]


def test_staff_with_totp_gives_the_code_at_sign_in(client, staff):
    totp_enrol(staff)
    response = sign_in(client, "boss")
    assert response.status_code == 302
    assert response["Location"] == reverse("mfa_authenticate")
    assert "_auth_user_id" not in client.session  # not signed in before the code
    wrong = client.post(reverse("mfa_authenticate"), {"code": "000000"})
    assert wrong.status_code == 200 and "_auth_user_id" not in client.session
    # The next period's code (MFA_TOTP_TOLERANCE = 1): never one already used.
    code = totp_code(TEST_TOTP_SECRET, at=time.time() + 30)
    assert client.post(reverse("mfa_authenticate"), {"code": code}).status_code == 302
    assert client.get("/manage/").status_code == 200


def test_a_recovery_code_signs_in_once(client, staff):
    from allauth.mfa.recovery_codes.internal.auth import RecoveryCodes

    totp_enrol(staff)
    codes = RecoveryCodes.activate(staff).get_unused_codes()
    sign_in(client, "boss")
    assert client.post(reverse("mfa_authenticate"), {"code": codes[0]}).status_code == 302
    assert client.get("/manage/").status_code == 200
    client.logout()
    sign_in(client, "boss")
    client.post(reverse("mfa_authenticate"), {"code": codes[0]})
    assert "_auth_user_id" not in client.session


def test_a_session_without_the_factor_is_signed_out(client, staff):
    totp_enrol(staff)
    force_login_password_only(client, staff)  # a session made around the code prompt
    response = client.get("/manage/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert "_auth_user_id" not in client.session


def test_admin_group_members_need_it_too(client, django_user_model):
    member = django_user_model.objects.create_user("adam", password=PASSWORD)
    role_add(user=member, role=ADMIN)
    sign_in(client, "adam")
    assert client.get("/manage/")["Location"] == reverse("mfa_activate_totp")


def test_clinicians_may_sign_in_without_it_and_may_enrol(client, django_user_model):
    clinician = django_user_model.objects.create_user("cleo", password=PASSWORD)
    role_add(user=clinician, role=CLINICIAN)
    sign_in(client, "cleo")
    assert client.get("/rate/").status_code == 200
    page = client.get(reverse("mfa_activate_totp")).content.decode()
    # Offered, not required: the page says what it is for without "your account can manage".
    assert 'id="why-second-factor"' in page and "manage studies" not in page


def test_the_sign_in_page_offers_forgot_password(client, db):
    page = client.get(reverse("account_login")).content.decode()
    assert re.search(r'href="/accounts/password/reset/"[^>]*>Forgot password\?', page)


def test_django_admins_own_sign_in_form_is_not_a_way_around_the_code(client, staff):
    totp_enrol(staff)
    response = client.post("/admin/login/", {"username": "boss", "password": PASSWORD})
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert "_auth_user_id" not in client.session
    assert client.get("/admin/")["Location"].startswith("/admin/login/")


def test_an_autosave_of_staff_without_a_factor_waits_for_enrolment(client, staff):
    sign_in(client, "boss")
    response = client.post("/rate/some-token/save", {"score": 3}, HTTP_HX_REQUEST="true")
    assert response.status_code == 401
    assert response["HX-Redirect"] == reverse("mfa_activate_totp")


def test_an_sso_only_account_enrols_only_soon_after_signing_in(client, django_user_model):
    from allauth.account.internal.flows.login import record_authentication
    from django.http import HttpRequest

    user = django_user_model.objects.create_user("sso-only")
    user.set_unusable_password()
    user.save()
    role_add(user=user, role=CLINICIAN)
    # A session alone (allauth would count it as re-authenticated: nothing to re-enter) is
    # signed out and asked to sign in again before it adds a factor.
    force_login_password_only(client, user)
    response = client.get(reverse("mfa_activate_totp"))
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert "_auth_user_id" not in client.session
    # Right after a (single sign-on) sign-in it may.
    force_login_password_only(client, user)
    request = HttpRequest()
    request.session = client.session
    record_authentication(request, user, "socialaccount", provider="oidc", uid="1")
    request.session.save()
    assert client.get(reverse("mfa_activate_totp")).status_code == 200
