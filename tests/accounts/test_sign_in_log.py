"""The sign-in log (who, when, from where, succeeded, second factor) and the idle timeout."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.middleware import LAST_SEEN
from accounts.models import SignInEvent
from accounts.roles import CLINICIAN, role_add
from tests.second_factor import TEST_TOTP_SECRET, totp_code, totp_enrol

PASSWORD = "a-Long-pass-9871-log"


@pytest.fixture
def cleo(django_user_model):
    user = django_user_model.objects.create_user("cleo", password=PASSWORD)
    role_add(user=user, role=CLINICIAN)
    return user


def test_successes_and_failures_are_logged_with_the_address(client, cleo):
    client.post(
        reverse("account_login"), {"login": "cleo", "password": "wrong"}, REMOTE_ADDR="10.1.2.3"
    )
    client.post(
        reverse("account_login"), {"login": "cleo", "password": PASSWORD}, REMOTE_ADDR="10.1.2.4"
    )
    failed, ok = SignInEvent.objects.order_by("id")
    assert (failed.username, failed.succeeded, failed.ip_address, failed.user) == (
        "cleo", False, "10.1.2.3", None,
    )  # fmt: skip
    assert (ok.user, ok.succeeded, ok.ip_address, ok.two_factor, ok.method) == (
        cleo, True, "10.1.2.4", False, "password",
    )  # fmt: skip


def test_a_sign_in_with_a_code_is_logged_as_two_factor(client, django_user_model):
    staff = django_user_model.objects.create_user("boss", password=PASSWORD, is_staff=True)
    totp_enrol(staff)
    client.post(reverse("account_login"), {"login": "boss", "password": PASSWORD})
    assert not SignInEvent.objects.filter(succeeded=True).exists()  # not in before the code
    code = totp_code(TEST_TOTP_SECRET, at=time.time() + 30)
    client.post(reverse("mfa_authenticate"), {"code": code})
    event = SignInEvent.objects.get(succeeded=True)
    assert event.user == staff and event.two_factor


def test_old_rows_go_after_the_configured_days(client, cleo, settings):
    settings.SIGNIN_LOG_DAYS = 30
    old = SignInEvent.objects.create(username="old", succeeded=True)
    SignInEvent.objects.filter(pk=old.pk).update(at=timezone.now() - timedelta(days=31))
    client.post(reverse("account_login"), {"login": "cleo", "password": PASSWORD})
    assert not SignInEvent.objects.filter(pk=old.pk).exists()
    assert SignInEvent.objects.filter(username="cleo").exists()


def test_admins_read_the_log_and_others_may_not(client, cleo, admin_member_client):
    SignInEvent.objects.create(username="=HYPERLINK(1)", succeeded=False, ip_address="10.0.0.9")
    page = admin_member_client.get(reverse("accounts:sign_ins")).content.decode()
    assert "10.0.0.9" in page and "=HYPERLINK(1)" in page
    client.force_login(cleo)
    assert client.get(reverse("accounts:sign_ins")).status_code == 403


def test_an_idle_session_is_signed_out_and_the_next_page_asks_to_sign_in(client, cleo, settings):
    client.force_login(cleo)
    assert client.get("/rate/").status_code == 200
    session = client.session
    session[LAST_SEEN] = int(time.time()) - settings.SESSION_IDLE_HOURS * 3600 - 5
    session.save()
    response = client.get("/rate/")
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('account_login')}?next=/rate/"
    assert "_auth_user_id" not in client.session


def test_a_session_in_use_stays(client, cleo, settings):
    client.force_login(cleo)
    client.get("/rate/")
    session = client.session
    session[LAST_SEEN] = int(time.time()) - settings.SESSION_IDLE_HOURS * 3600 + 60
    session.save()
    assert client.get("/rate/").status_code == 200
    assert client.session[LAST_SEEN] >= int(time.time()) - 5  # the clock moved on


def test_an_autosave_after_sign_out_gets_401_and_the_way_back(client, db):
    response = client.post(
        "/rate/some-token/save",
        {"score": 3},
        HTTP_HX_REQUEST="true",
        HTTP_HX_CURRENT_URL="http://testserver/rate/some-token/?x=1",
    )
    assert response.status_code == 401
    assert response["HX-Redirect"] == "/accounts/login/?next=/rate/some-token/%3Fx%3D1"
    # Pages (not htmx) still redirect as before.
    assert client.get("/rate/").status_code == 302
