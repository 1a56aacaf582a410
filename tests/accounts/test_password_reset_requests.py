"""What "Forgot password?" tells an outsider, over real HTTP against a running server: nothing
about whether an address is known (the same answer, the same work, in the same time), no e-mail
to an address no account has, and a link that points at the configured site whatever Host
header the request came with."""

from __future__ import annotations

import re
import statistics
import time

import pytest
import requests
from django.contrib.auth import get_user_model
from django.core import mail

from tests.live_session import LiveSession

pytestmark = pytest.mark.django_db(transaction=True)

KNOWN = "cleo@ward.example"
UNKNOWN = "nobody@ward.example"


@pytest.fixture
def cleo(db):
    return get_user_model().objects.create_user("cleo", email=KNOWN, password="pw-Cleo-9876")


@pytest.fixture
def queued(monkeypatch) -> list[dict]:
    """The tasks the web requests send to Celery, kept here instead of in the broker; a test
    runs them as a worker would (`run_queued`)."""
    from accounts.tasks import password_reset_mail_send

    sent: list[dict] = []
    monkeypatch.setattr(password_reset_mail_send, "delay", lambda **kwargs: sent.append(kwargs))
    return sent


def run_queued(sent: list[dict]) -> None:
    from accounts.tasks import password_reset_mail_send

    for kwargs in sent:
        password_reset_mail_send.apply(kwargs=kwargs).get()
    sent.clear()


def ask(live_server, email: str, *, host: str | None = None):
    """A forgot-password request from a fresh browser: the form's page, then the form; with
    `host`, the form is sent with that Host header (its cookie sent by hand: a cookie jar picks
    cookies by the Host header)."""
    session = LiveSession(live_server.url)
    session.get("/accounts/password/reset/")
    if host is None:
        return session.post("/accounts/password/reset/", {"email": email})
    token = session.http.cookies["csrftoken"]
    return requests.post(
        session.url("/accounts/password/reset/"),
        data={"email": email, "csrfmiddlewaretoken": token},
        headers={"Host": host, "Cookie": f"csrftoken={token}"},
        allow_redirects=False,
        timeout=30,
    )


def test_known_and_unknown_addresses_get_the_same_answer_and_the_same_work(
    live_server, cleo, queued
):
    """The request only hands the address to a task: looking the account up, making the
    link and sending it happen later, on a worker, so the answer cannot tell them apart."""
    mail.outbox.clear()
    known = ask(live_server, KNOWN)
    unknown = ask(live_server, UNKNOWN)
    assert (known.status_code, known.headers["Location"]) == (
        unknown.status_code,
        unknown.headers["Location"],
    )
    assert mail.outbox == []  # nothing was sent while the browser waited
    assert queued == [{"email": KNOWN}, {"email": UNKNOWN}]
    run_queued(queued)
    (message,) = mail.outbox
    assert message.to == [KNOWN]


def test_an_unknown_address_gets_no_e_mail_at_all(live_server, cleo, settings):
    """allauth wrote to any address typed into the form ("someone asked for a password for an
    account that does not exist"): anyone could make the platform mail anyone."""
    settings.CELERY_TASK_ALWAYS_EAGER = True
    from mentalbench.celery import app

    app.conf.task_always_eager = True
    try:
        mail.outbox.clear()
        assert ask(live_server, UNKNOWN).status_code == 302
        assert mail.outbox == []
        assert ask(live_server, KNOWN).status_code == 302
        assert [m.to for m in mail.outbox] == [[KNOWN]]
    finally:
        app.conf.task_always_eager = False


def test_the_link_is_built_from_the_site_url_not_the_host_header(
    live_server, cleo, queued, settings
):
    settings.SITE_URL = "https://mentalbench.hospital.example"
    mail.outbox.clear()
    assert ask(live_server, KNOWN, host="127.0.0.1:6666").status_code == 302
    run_queued(queued)
    (message,) = mail.outbox
    links = re.findall(r"\S+/accounts/password/reset/key/\S+", message.body)
    assert links and all(
        link.startswith("https://mentalbench.hospital.example/accounts/password/reset/key/")
        for link in links
    ), links
    assert "6666" not in message.body


def test_answers_take_the_same_time_for_known_and_unknown_addresses(
    live_server, cleo, queued, settings, monkeypatch
):
    """Medians of interleaved requests, with a mail relay that takes RELAY_SECONDS a message
    and a password link that takes RELAY_SECONDS to make: an answer that did either while the
    browser waited (allauth made a known address's link and sent it, and sent an unknown one
    its "no such account" message) would take at least that long, and a known address's answer
    would differ from an unknown one's by it. The work a request does for a known address is
    slowed so that its difference stands out of the noise of a busy machine: unslowed, it was
    8 to 20 ms (medians of 25 to 80 requests: a known address 72 to 100 ms, an unknown one 64
    to 86 ms on a busy test machine). The rate limit is off here, or later requests would be
    answered 429 at once."""
    from accounts.tokens import PrivilegeBoundTokenGenerator

    make_token = PrivilegeBoundTokenGenerator.make_token

    def slow_make_token(self, user):
        time.sleep(RELAY_SECONDS)
        return make_token(self, user)

    monkeypatch.setattr(PrivilegeBoundTokenGenerator, "make_token", slow_make_token)
    settings.ACCOUNT_RATE_LIMITS = {"login_failed": None, "login": None, "reset_password": None}
    settings.EMAIL_BACKEND = "tests.accounts.test_password_reset_requests.SlowMailRelay"
    times: dict[str, list[float]] = {KNOWN: [], UNKNOWN: []}
    session = LiveSession(live_server.url)
    session.get("/accounts/password/reset/")
    for _ in range(10):
        for email in (KNOWN, UNKNOWN):
            started = time.perf_counter()
            assert session.post("/accounts/password/reset/", {"email": email}).status_code == 302
            times[email].append(time.perf_counter() - started)
    known, unknown = (statistics.median(times[e]) for e in (KNOWN, UNKNOWN))
    assert abs(known - unknown) < RELAY_SECONDS / 5, (known, unknown)
    assert known < RELAY_SECONDS and unknown < RELAY_SECONDS, (known, unknown)


RELAY_SECONDS = 0.25


class SlowMailRelay:
    """An SMTP relay that takes RELAY_SECONDS to accept each message (a real one takes tens of
    milliseconds to seconds)."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def send_messages(self, messages) -> int:
        time.sleep(RELAY_SECONDS * len(messages))
        return len(messages)


def test_a_password_only_account_of_single_sign_on_gets_no_link(live_server, queued, settings):
    """An account that signs in through single sign-on has no password here: a link by e-mail
    would give it one that outlives its removal at the identity provider."""
    from allauth.socialaccount.models import SocialAccount

    sso = get_user_model().objects.create_user("dr.sso", email="dr.sso@hospital.example")
    sso.set_unusable_password()
    sso.save()
    SocialAccount.objects.create(user=sso, provider="hospital", uid="hospital-0042")
    mail.outbox.clear()
    assert ask(live_server, "dr.sso@hospital.example").status_code == 302
    run_queued(queued)
    assert mail.outbox == []
