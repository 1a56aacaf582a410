"""Forgot password, by e-mail: the link is single-use, expires, and dies when the account's
rights change (the same token as the admins' set-password links)."""

from __future__ import annotations

import re
import time

import pytest
from django.conf import settings
from django.core import mail
from django.test import override_settings
from django.urls import reverse

from accounts.roles import CLINICIAN, role_add
from accounts.tokens import PrivilegeBoundTokenGenerator

# The e-mail is sent by a Celery task (tests/accounts/test_password_reset_requests.py holds
# that the request itself sends nothing): here it runs at once.
pytestmark = pytest.mark.usefixtures("celery_eager")

OLD = "an-Old-pass-1234-cleo"
NEW = "a-New-pass-5678-cleo"


@pytest.fixture
def cleo(django_user_model):
    user = django_user_model.objects.create_user("cleo", email="cleo@ward.example", password=OLD)
    role_add(user=user, role=CLINICIAN)
    return user


def request_link(client, email: str = "cleo@ward.example") -> str | None:
    """The path of the link e-mailed (to SITE_URL) for `email`; None when none was sent."""
    mail.outbox.clear()
    response = client.post(reverse("account_reset_password"), {"email": email})
    assert response.status_code == 302
    site = re.escape(settings.SITE_URL)
    links = [
        m
        for message in mail.outbox
        for m in re.findall(site + r"(/accounts/password/reset/key/\S+/)", message.body)
    ]
    return links[0] if links else None


def set_password(client, link: str, password: str):
    """Follow the e-mailed link and submit a new password; the final page."""
    form = client.get(link, follow=True)
    target = form.redirect_chain[-1][0] if form.redirect_chain else link
    return client.post(target, {"password1": password, "password2": password}, follow=True)


def test_forgot_password_sends_a_link_that_sets_the_password_once(client, cleo):
    link = request_link(client)
    assert link is not None
    set_password(client, link, NEW)
    cleo.refresh_from_db()
    assert cleo.check_password(NEW)
    # The same link again: refused, the password stays.
    page = set_password(client, link, "a-Third-pass-9999-cleo")
    assert "Bad Token" in page.content.decode() or "invalid" in page.content.decode().lower()
    cleo.refresh_from_db()
    assert cleo.check_password(NEW)
    # And the new password signs in.
    client.logout()
    signed_in = client.post(reverse("account_login"), {"login": "cleo", "password": NEW})
    assert signed_in.status_code == 302 and "_auth_user_id" in client.session


def test_the_link_expires(client, cleo, monkeypatch):
    link = request_link(client)
    later = time.time() + 73 * 3600  # PASSWORD_LINK_HOURS defaults to 72
    monkeypatch.setattr(
        PrivilegeBoundTokenGenerator,
        "_now",
        lambda self: __import__("datetime").datetime.fromtimestamp(later),
    )
    set_password(client, link, NEW)
    cleo.refresh_from_db()
    assert cleo.check_password(OLD)


def test_the_link_dies_when_the_account_is_promoted(client, cleo):
    link = request_link(client)
    cleo.is_staff = True
    cleo.save()
    set_password(client, link, NEW)
    cleo.refresh_from_db()
    assert cleo.check_password(OLD)


def test_an_unknown_address_gets_no_link(client, cleo):
    assert request_link(client, "nobody@ward.example") is None


@override_settings(EMAIL_BACKEND="django.core.mail.backends.console.EmailBackend")
def test_without_smtp_the_link_is_printed_in_the_log(client, cleo, capsys):
    client.post(reverse("account_reset_password"), {"email": "cleo@ward.example"})
    assert "/accounts/password/reset/key/" in capsys.readouterr().out


def test_a_signed_in_session_cannot_add_an_address_that_would_receive_the_next_link(client, cleo):
    """allauth's e-mail page took any address, unverified, and the next "forgot password" for it
    sent a link to this account: whoever held a session kept the account after losing it."""
    from allauth.account.models import EmailAddress

    client.force_login(cleo)
    page = client.get("/accounts/email/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "cleo@ward.example" in text and "Only an admin sets or changes it" in text
    added = client.post("/accounts/email/", {"action_add": "", "email": "thief@elsewhere.example"})
    assert added.status_code == 405
    assert not EmailAddress.objects.filter(email="thief@elsewhere.example").exists()
    client.logout()
    assert request_link(client, "thief@elsewhere.example") is None
    assert request_link(client) is not None  # the admin-set address still gets its link
