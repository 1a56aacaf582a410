"""E-mail that clinicians get, end to end against a real SMTP server on loopback (aiosmtpd):
an admin invites two clinicians → the invitations arrive → both set their passwords → one
finishes, the other pauses and gets exactly one reminder on the simulated schedule → that one
unsubscribes and gets nothing more. A relay that is down loses no reminder."""

from __future__ import annotations

import email
import email.policy
import re
import socket
import time
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from aiosmtpd.controller import Controller
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotation.models import Assignment, MailSent, Rater
from annotation.services import assignments_create, mail
from tests.factories import study_make

SITE_URL = "https://mentalbench.hospital.example"


class Inbox:
    """What the SMTP server received, parsed."""

    def __init__(self) -> None:
        self.messages: list[email.message.EmailMessage] = []

    async def handle_DATA(self, server, session, envelope) -> str:  # noqa: N802 - aiosmtpd's name
        self.messages.append(
            email.message_from_bytes(envelope.content, policy=email.policy.default)
        )
        return "250 OK"

    def to(self, address: str) -> list[email.message.EmailMessage]:
        return [m for m in self.messages if m["To"] == address]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def smtp(settings):
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=_free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", controller.port
    settings.EMAIL_USE_TLS, settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD = False, "", ""
    settings.SITE_URL = SITE_URL
    yield inbox, controller
    controller.stop()


@pytest.fixture
def eager_tasks():
    from mentalbench.celery import app

    saved = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = saved


def _arrived(inbox: Inbox, count: int) -> None:
    """The SMTP server hands a message over on its own thread: wait for it briefly."""
    deadline = time.monotonic() + 10
    while len(inbox.messages) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(inbox.messages) == count, [m["Subject"] for m in inbox.messages]


def _link(message, path_prefix: str) -> str:
    body = message.get_content()
    (url,) = [u for u in re.findall(r"https?://\S+", body) if path_prefix in u]
    assert url.startswith(SITE_URL), url  # built from SITE_URL, never from a request's Host
    return urlsplit(url).path


def _blind(message, study) -> None:
    """No message names a responder or a system."""
    body = message.get_content()
    for name in study.conversations.values_list("responses__responder__name", flat=True):
        assert name not in body
    for key in study.conversations.values_list("responses__responder__key", flat=True):
        assert key not in body


def test_invitation_reminder_and_unsubscribe_end_to_end(
    smtp, eager_tasks, admin_member_client, django_capture_on_commit_callbacks, db
):
    inbox, _ = smtp
    study = study_make(name="Exam stress", conversations=4)
    study.remind_after_days = 3
    study.save(update_fields=["remind_after_days"])

    # 1. The admin invites two clinicians from the study page.
    for username, address in (
        ("dr_one", "one@hospital.example"),
        ("dr_two", "two@hospital.example"),
    ):
        with django_capture_on_commit_callbacks(execute=True):
            response = admin_member_client.post(
                reverse("annotation:manage_invite"),
                {"username": username, "email": address, "study": study.pk},
            )
        assert response.status_code == 302
        page = admin_member_client.get(response["Location"]).content.decode()
        assert 'id="invitation-emailed"' in page and address in page
    _arrived(inbox, 2)
    for address in ("one@hospital.example", "two@hospital.example"):
        (invitation,) = inbox.to(address)
        assert "invitation" in invitation["Subject"].lower()
        assert "Exam stress" in invitation.get_content()
        assert invitation["List-Unsubscribe"].strip().startswith(f"<{SITE_URL}/mail/unsubscribe/")
        _blind(invitation, study)

    # 2. Each clinician sets a password from the e-mailed link.
    User = get_user_model()
    for username, address in (
        ("dr_one", "one@hospital.example"),
        ("dr_two", "two@hospital.example"),
    ):
        browser = Client()
        path = _link(inbox.to(address)[0], "/accounts/set-password/")
        form = browser.get(path)  # Django moves the token into the session, then the form
        assert form.status_code == 302
        done = browser.post(
            form["Location"],
            {"new_password1": "a-long-pass-phrase-42", "new_password2": "a-long-pass-phrase-42"},
        )
        assert done.status_code == 302, done.content.decode()[:500]
        assert User.objects.get(username=username).has_usable_password()

    # 3. Both get work; dr_one finishes it, dr_two starts and stops.
    one, two = (Rater.objects.get(user__username=u) for u in ("dr_one", "dr_two"))
    assignments_create(study=study, clinicians=[one, two])
    start = timezone.now()
    Assignment.objects.filter(rater=one).update(
        status=Assignment.Status.SUBMITTED, submitted_at=start, last_activity_at=start
    )
    Assignment.objects.filter(rater=two).update(started_at=start, last_activity_at=start)

    # 4. The hourly check: nothing before three days; then one reminder, to dr_two only, once.
    assert mail.reminders_send(now=start + timedelta(days=2)) == 0
    assert mail.reminders_send(now=start + timedelta(days=3, hours=1)) == 1
    for hours in (2, 30, 60):
        assert mail.reminders_send(now=start + timedelta(days=3, hours=hours)) == 0
    _arrived(inbox, 3)
    (reminder,) = [m for m in inbox.to("two@hospital.example") if m not in inbox.messages[:2]]
    assert not [m for m in inbox.to("one@hospital.example") if "waiting" in m["Subject"]]
    assert "Exam stress" in reminder["Subject"] and "2 tasks" in reminder.get_content()
    assert _link(reminder, "/rate/") == reverse("annotation:queue")
    _blind(reminder, study)

    # 5. dr_two unsubscribes from the link (no sign-in), and gets nothing more: neither a
    # reminder for a later pause nor anything else the platform decides to send.
    anonymous = Client()
    unsubscribe = _link(reminder, "/mail/unsubscribe/")
    assert "Stop the e-mails" in anonymous.get(unsubscribe).content.decode()
    assert 'id="unsubscribed"' in anonymous.post(unsubscribe).content.decode()
    later = start + timedelta(days=5)
    Assignment.objects.filter(rater=two).update(last_activity_at=later)
    assert mail.reminders_send(now=later + timedelta(days=4)) == 0
    assert mail.invitation_send(user_id=two.user_id) is False
    time.sleep(0.3)
    assert len(inbox.messages) == 3
    assert list(MailSent.objects.order_by("id").values_list("kind", "user__username")) == [
        ("invitation", "dr_one"), ("invitation", "dr_two"), ("reminder", "dr_two"),
    ]  # fmt: skip


def test_a_relay_that_is_down_loses_no_reminder(smtp, settings, db):
    inbox, controller = smtp
    study = study_make(name="Relay study", conversations=1)
    user = get_user_model().objects.create_user("dr_three", email="three@hospital.example")
    rater = Rater.objects.create(name="dr_three", kind=Rater.Kind.CLINICIAN, user=user)
    assignments_create(study=study, clinicians=[rater])
    long_ago = timezone.now() - timedelta(days=10)
    Assignment.objects.filter(rater=rater).update(created_at=long_ago)
    settings.EMAIL_PORT = _free_port()  # the relay is down: nothing listens there
    with pytest.raises(OSError):  # the task retries on it (annotation.tasks)
        mail.reminders_send()
    assert not MailSent.objects.exists()  # not recorded as sent
    settings.EMAIL_PORT = controller.port  # back up
    assert mail.reminders_send() == 1
    _arrived(inbox, 1)
    assert mail.reminders_send() == 0


def test_an_unsubscribe_link_that_was_tampered_with_is_refused(db):
    user = get_user_model().objects.create_user("dr_four", email="four@hospital.example")
    token = mail.unsubscribe_token(user_id=user.pk)
    response = Client().post(reverse("annotation:unsubscribe", args=[token[:-2] + "xx"]))
    assert response.status_code == 404
    assert mail.mail_wanted(user=user)


def test_reminders_are_checked_by_celery_beat():
    from mentalbench.celery import app

    app.loader.import_default_modules()
    tasks = {entry["task"] for entry in app.conf.beat_schedule.values()}
    assert "annotation.tasks.reminders_send" in tasks
