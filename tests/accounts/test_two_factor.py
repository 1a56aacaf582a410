"""Staff and the admin group sign in with a second factor (TOTP, recovery codes); others may."""

from __future__ import annotations

import re
import time

import pytest
from allauth.mfa.models import Authenticator
from django.urls import reverse

from annotation.roles import ADMIN, CLINICIAN, role_add
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


def sign_in(client, username: str, password: str = PASSWORD):
    return client.post(reverse("account_login"), {"login": username, "password": password})


# Committed for real: allauth announces a new authenticator after the commit, as in production.
@pytest.mark.django_db(transaction=True)
def test_staff_without_an_authenticator_must_enrol_before_anything_else(client, staff):
    assert sign_in(client, "boss").status_code == 302
    for path in ("/", "/manage/", "/analysis/", "/admin/"):
        response = client.get(path)
        assert response.status_code == 302, path
        assert response["Location"] == reverse("mfa_activate_totp"), path
    # Enrolling is a sensitive change: allauth asks for the password once more first.
    assert client.get(reverse("mfa_activate_totp"))["Location"].startswith(
        reverse("account_reauthenticate")
    )
    client.post(reverse("account_reauthenticate"), {"password": PASSWORD})
    page = client.get(reverse("mfa_activate_totp"))
    assert page.status_code == 200
    # The enrolment page shows the secret to type into the app; a correct code enrols.
    secret = client.session["mfa.totp.secret"]
    response = client.post(reverse("mfa_activate_totp"), {"code": totp_code(secret)})
    assert response.status_code == 302
    assert Authenticator.objects.filter(user=staff, type="totp").exists()
    assert Authenticator.objects.filter(user=staff, type="recovery_codes").exists()
    # The session that enrolled passed the factor: the platform opens.
    assert client.get("/manage/").status_code == 200


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
    client.post(reverse("account_reauthenticate"), {"password": PASSWORD})
    assert client.get(reverse("mfa_activate_totp")).status_code == 200


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
