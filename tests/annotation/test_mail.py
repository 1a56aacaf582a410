"""E-mail that clinicians get, end to end against a real SMTP server on loopback (aiosmtpd):
an admin invites two clinicians → the invitations arrive → both set their passwords → one
finishes, the other pauses and gets exactly one reminder on the simulated schedule → that one
unsubscribes and gets nothing more. A relay that is down loses no reminder. Reminders before a
study's deadline and after it, once per deadline; the leads' weekly digest, counts only."""

from __future__ import annotations

import email
import email.policy
import re
import socket
import time
from datetime import UTC, date, datetime, timedelta
from urllib.parse import urlsplit

import pytest
from aiosmtpd.controller import Controller
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotation.membership import CLINICIAN, LEAD, member_add
from annotation.models import Assignment, Conversation, MailSent, Rater
from annotation.services import assignments_create, mail
from annotation.services.consent import consent_text_publish
from tests.factories import clinician_make, study_make, user_make

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
    responses = study.conversations.filter(responses__isnull=False)
    for name in responses.values_list("responses__responder__name", flat=True):
        assert name not in body
    for key in responses.values_list("responses__responder__key", flat=True):
        assert key not in body


def test_invitation_reminder_and_unsubscribe_end_to_end(
    smtp, eager_tasks, django_capture_on_commit_callbacks, db
):
    inbox, _ = smtp
    study = study_make(name="Exam stress", conversations=4)
    study.remind_after_days = 3
    study.save(update_fields=["remind_after_days"])
    consent_text_publish(study=study, text="I agree that my ratings are used for research.")

    # 1. The study's lead (no platform role) invites two clinicians from the team page.
    lead = Client()
    lead.force_login(member_add(study=study, user=user_make(username="dr_lead"), role=LEAD).user)
    for username, address, site in (
        ("dr_one", "one@hospital.example", "North"),
        ("dr_two", "two@hospital.example", "South"),
    ):
        with django_capture_on_commit_callbacks(execute=True):
            response = lead.post(
                reverse("annotation:manage_team_invite", args=[study.pk]),
                {"username": username, "email": address, "site": site},
            )
        assert response.status_code == 302, response.content.decode()[:500]
        page = lead.get(response["Location"]).content.decode()
        assert f"is invited: the set-password link is on its way to {address}" in page
        assert "/accounts/set-password/" not in page  # the link goes to the address only
    assert set(study.members.filter(role=CLINICIAN).values_list("user__username", "site")) == {
        ("dr_one", "North"), ("dr_two", "South"),
    }  # fmt: skip
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

    # 3. Both get work, sign in with their new passwords, accept the study's consent and rate;
    # dr_one finishes, dr_two starts and stops.
    one, two = (Rater.objects.get(user__username=u) for u in ("dr_one", "dr_two"))
    assignments_create(study=study, clinicians=[one, two])
    for rater in (one, two):
        browser = Client()
        signed_in = browser.post(
            reverse("account_login"),
            {"login": rater.user.username, "password": "a-long-pass-phrase-42"},
        )
        assert signed_in.status_code == 302 and "login" not in signed_in["Location"]
        assignment = Assignment.objects.filter(rater=rater).first()
        save = reverse("annotation:save", args=[assignment.token])
        score = {
            "item": assignment.items.first().token,
            "attribute": study.rubric.attributes.first().pk,
            "score": 4,
        }
        assert browser.post(save, score).status_code == 409  # consent first
        browser.post(reverse("annotation:consent", args=[study.pk]), {"action": "accept"})
        assert browser.post(save, score).status_code == 200
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


def test_no_stall_reminder_for_work_that_waits_on_a_practice_result(smtp, db):
    """A clinician whose practice is submitted and not yet passed cannot open their real work:
    nothing is waiting on them, so nothing reminds them."""
    from annotation.models import TrainingOutcome

    inbox, _ = smtp
    study = study_make(name="Held study", conversations=2)
    rater = _clinician("dr_held")
    real, practice_conversation = study.conversations.order_by("external_id")
    Conversation.objects.filter(pk=practice_conversation.pk).update(practice=True)
    assignments_create(study=study, clinicians=[rater], conversations=[real.pk])
    Assignment.objects.create(
        rater=rater,
        conversation=practice_conversation,
        kind=Assignment.Kind.PRACTICE,
        status=Assignment.Status.SUBMITTED,
    )
    long_ago = timezone.now() - timedelta(days=10)
    Assignment.objects.filter(rater=rater).update(created_at=long_ago)
    assert mail.reminders_send() == 0
    # The lead passes the practice: the work is theirs now, and the stall is reminded of.
    TrainingOutcome.objects.create(rater=rater, study=study, passed=True)
    assert mail.reminders_send() == 1
    _arrived(inbox, 1)


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


def _at(day: date, hour: int = 9) -> datetime:
    return datetime(day.year, day.month, day.day, hour, tzinfo=UTC)


def _clinician(username: str):
    rater = clinician_make(username=username)
    rater.user.email = f"{username}@hospital.example"
    rater.user.save(update_fields=["email"])
    return rater


def test_deadline_reminders_once_per_deadline_and_not_after_unsubscribing(smtp, settings, db):
    inbox, _ = smtp
    settings.MAIL_DEADLINE_REMIND_DAYS, settings.MAIL_DEADLINE_PASSED = 3, True
    study = study_make(name="Deadline study", conversations=4)
    study.deadline = date(2027, 3, 10)  # a Wednesday
    study.save(update_fields=["deadline"])
    ids = list(study.conversations.order_by("external_id").values_list("pk", flat=True))
    busy, done, training = (_clinician(u) for u in ("dr_busy", "dr_done", "dr_training"))
    assignments_create(study=study, clinicians=[busy], conversations=ids[:2])
    assignments_create(study=study, clinicians=[done], conversations=ids[2:3])
    assignments_create(study=study, clinicians=[training], conversations=ids[3:])
    Assignment.objects.filter(rater=done).update(status=Assignment.Status.SUBMITTED)
    # dr_training has practice to do first: their real work is not theirs to do yet.
    practice = Conversation.objects.create(
        study=study, external_id="p0", context="x", practice=True
    )
    Assignment.objects.create(rater=training, conversation=practice, kind=Assignment.Kind.PRACTICE)

    # Four days before: nothing; three days before: one reminder, to dr_busy only; then
    # nothing more for that deadline however often the check runs, the deadline day included.
    assert mail.deadline_reminders_send(now=_at(date(2027, 3, 6))) == 0
    assert mail.deadline_reminders_send(now=_at(date(2027, 3, 7))) == 1
    for day, hour in ((7, 10), (8, 0), (9, 23), (10, 9)):
        assert mail.deadline_reminders_send(now=_at(date(2027, 3, day), hour)) == 0
    _arrived(inbox, 1)
    (before,) = inbox.to("dr_busy@hospital.example")
    assert before["Subject"].strip() == "[MentalBench] “Deadline study” is due in 3 days"
    body = before.get_content()
    assert "Wednesday 10 March 2027" in body and "2 conversations" in body
    assert _link(before, "/rate/") == reverse("annotation:queue")
    assert before["List-Unsubscribe"].strip().startswith(f"<{SITE_URL}/mail/unsubscribe/")
    _blind(before, study)

    # The day after: once more, that the deadline passed; then nothing.
    assert mail.deadline_reminders_send(now=_at(date(2027, 3, 11))) == 1
    assert mail.deadline_reminders_send(now=_at(date(2027, 3, 12))) == 0
    _arrived(inbox, 2)
    passed = inbox.messages[1]
    assert passed["To"] == "dr_busy@hospital.example" and "passed" in passed["Subject"]
    _blind(passed, study)

    # The lead moves the deadline: the new date is announced once.
    study.deadline = date(2027, 3, 20)
    study.save(update_fields=["deadline"])
    assert mail.deadline_reminders_send(now=_at(date(2027, 3, 17))) == 1
    assert mail.deadline_reminders_send(now=_at(date(2027, 3, 18))) == 0
    _arrived(inbox, 3)
    assert "Saturday 20 March 2027" in inbox.messages[2].get_content()

    # dr_busy unsubscribes: the passed deadline brings nothing.
    assert Client().post(_link(inbox.messages[2], "/mail/unsubscribe/")).status_code == 200
    assert mail.deadline_reminders_send(now=_at(date(2027, 3, 21))) == 0
    time.sleep(0.3)
    assert len(inbox.messages) == 3
    assert list(MailSent.objects.order_by("id").values_list("kind", "key")) == [
        ("deadline", f"deadline:{study.pk}:2027-03-10"),
        ("deadline_passed", f"deadline_passed:{study.pk}:2027-03-10"),
        ("deadline", f"deadline:{study.pk}:2027-03-20"),
    ]


def test_no_deadline_mail_for_a_deadline_long_past_or_without_a_deadline(smtp, db):
    inbox, _ = smtp
    study = study_make(name="Old study", conversations=1)
    assignments_create(study=study, clinicians=[_clinician("dr_old")])
    assert mail.deadline_reminders_send(now=_at(date(2027, 3, 1))) == 0  # no deadline
    study.deadline = date(2027, 1, 1)
    study.save(update_fields=["deadline"])
    assert mail.deadline_reminders_send(now=_at(date(2027, 3, 1))) == 0  # long past
    time.sleep(0.2)
    assert not inbox.messages


def test_weekly_digest_to_each_lead_with_counts_per_site(smtp, db):
    inbox, _ = smtp
    study = study_make(name="Digest study", conversations=4)
    study.deadline = date(2027, 3, 3)
    study.save(update_fields=["deadline"])
    lead = user_make(username="lead_lee", email="lee@hospital.example")
    member_add(study=study, user=lead, role=LEAD)
    user_make(username="admin_ann", email="ann@hospital.example", role="admin")  # not a lead
    ids = list(study.conversations.order_by("external_id").values_list("pk", flat=True))
    north, south_idle, south_done = (_clinician(u) for u in ("dr_n", "dr_s1", "dr_s2"))
    assignments_create(study=study, clinicians=[north], conversations=ids[:2])
    assignments_create(study=study, clinicians=[south_idle], conversations=ids[2:3])
    assignments_create(study=study, clinicians=[south_done], conversations=ids[3:])
    member_add(study=study, user=north.user, role=CLINICIAN, site="North Hospital")
    member_add(study=study, user=south_idle.user, role=CLINICIAN, site="South Clinic")
    member_add(study=study, user=south_done.user, role=CLINICIAN, site="South Clinic")
    monday = date(2027, 3, 1)
    sunday = _at(monday - timedelta(days=1))
    first, second = Assignment.objects.filter(rater=north).order_by("id")
    Assignment.objects.filter(pk=first.pk).update(
        status=Assignment.Status.SUBMITTED, started_at=sunday, submitted_at=sunday
    )
    Assignment.objects.filter(pk=second.pk).update(
        status=Assignment.Status.IN_PROGRESS, started_at=sunday
    )
    Assignment.objects.filter(rater=south_done).update(
        status=Assignment.Status.SUBMITTED, started_at=sunday, submitted_at=sunday
    )

    # Monday morning: one digest, to the lead only; nothing more that week.
    assert mail.lead_digests_send(now=_at(monday)) == 1
    for day in (1, 2, 6):
        assert mail.lead_digests_send(now=_at(monday + timedelta(days=day), 20)) == 0
    _arrived(inbox, 1)
    (digest,) = inbox.to("lee@hospital.example")
    assert digest["Subject"].strip() == "[MentalBench] Weekly progress of “Digest study”"
    body = digest.get_content().replace("\r\n", "\n")
    assert "Conversations given to clinicians: 4, of which 2 are done" in body
    assert "Deadline: Wednesday 3 March 2027." in body
    all_sites, north_part, south_part = body.split("\n\n")[3:6]
    assert "4 assigned, 2 submitted (2 in the last 7 days), 2 open, 0 flagged" in all_sites
    assert "clinicians: 3; not started: 1; overdue: 0" in all_sites
    assert north_part.startswith("North Hospital:")
    assert "2 assigned, 1 submitted (1 in the last 7 days), 1 open" in north_part
    assert "clinicians: 1; not started: 0; overdue: 0" in north_part
    assert south_part.startswith("South Clinic:")
    assert "2 assigned, 1 submitted (1 in the last 7 days), 1 open" in south_part
    assert "clinicians: 2; not started: 1; overdue: 0" in south_part
    assert f"/analysis/studies/{study.pk}/" in body
    for username in ("dr_n", "dr_s1", "dr_s2"):
        assert username not in body  # counts only
    _blind(digest, study)

    # The next Monday: the week's digest, the deadline now passed.
    assert mail.lead_digests_send(now=_at(monday + timedelta(days=7))) == 1
    _arrived(inbox, 2)
    body = inbox.messages[1].get_content()
    assert "4 assigned, 2 submitted (0 in the last 7 days), 2 open, 0 flagged" in body
    assert "clinicians: 3; not started: 1; overdue: 2" in body

    # The lead unsubscribes: no digest the week after.
    assert Client().post(_link(inbox.messages[1], "/mail/unsubscribe/")).status_code == 200
    assert mail.lead_digests_send(now=_at(monday + timedelta(days=14))) == 0
    time.sleep(0.3)
    assert len(inbox.messages) == 2
    assert set(MailSent.objects.values_list("kind", flat=True)) == {"digest"}


def test_the_digest_counts_what_the_team_page_counts(smtp, db):
    """A flagged task, a repeat (test-retest), a member with nothing assigned and a clinician
    with no site: the digest's numbers are the team page's, not a second definition."""
    from annotation.team_selectors import NO_SITE, team_progress

    inbox, _ = smtp
    study = study_make(name="Same numbers", conversations=4)
    member_add(study=study, user=user_make(username="lead_lo", email="lo@h.example"), role=LEAD)
    ids = list(study.conversations.order_by("external_id").values_list("pk", flat=True))
    busy, sited = _clinician("dr_busy"), _clinician("dr_sited")
    assignments_create(study=study, clinicians=[busy], conversations=ids[:3])
    assignments_create(study=study, clinicians=[sited], conversations=ids[3:])
    member_add(study=study, user=sited.user, role=CLINICIAN, site="West")
    member_add(study=study, user=_clinician("dr_new").user, role=CLINICIAN, site="West")
    first, second, _third = Assignment.objects.filter(rater=busy).order_by("id")
    Assignment.objects.filter(pk=first.pk).update(
        status=Assignment.Status.SUBMITTED, submitted_at=timezone.now()
    )
    Assignment.objects.filter(pk=second.pk).update(status=Assignment.Status.FLAGGED)
    Assignment.objects.create(
        rater=busy, conversation_id=ids[0], kind=Assignment.Kind.RETEST, part=1
    )  # a repeat is not more work on the team page: nor in the digest

    assert mail.lead_digests_send(now=timezone.now()) == 1
    _arrived(inbox, 1)
    body = inbox.messages[0].get_content().replace("\r\n", "\n")
    team = team_progress(study=study)
    by_site = {row.site: row for row in team.sites}
    assert set(by_site) == {"West", NO_SITE}
    for heading, row in (("All sites:", team.total), *((f"{s}:", r) for s, r in by_site.items())):
        part = body[body.index(heading) :].split("\n\n")[0]
        assert (
            f"{row.assigned} assigned, {row.submitted} submitted ({row.submitted_week} in the "
            f"last 7 days), {row.open} open, {row.flagged} flagged"
        ) in part
        assert (
            f"clinicians: {row.clinicians}; not started: {row.not_started}; overdue: {row.overdue}"
        ) in part
    assert "3 assigned, 1 submitted (1 in the last 7 days), 2 open, 1 flagged" in body
    assert "clinicians: 3; not started: 1; overdue: 0" in body  # dr_new has nothing yet
    assert "Conversations given to clinicians: 4, of which 1 are done" in body


def test_the_beat_task_sends_deadline_reminders_and_digests(smtp, settings, db):
    from annotation import tasks

    inbox, _ = smtp
    study = study_make(name="Task study", conversations=1)
    study.deadline = timezone.localdate() + timedelta(days=1)
    study.save(update_fields=["deadline"])
    member_add(
        study=study,
        user=user_make(username="lead_tia", email="tia@hospital.example"),
        role=LEAD,
    )
    assignments_create(study=study, clinicians=[_clinician("dr_task")])
    tasks.reminders_send()
    _arrived(inbox, 2)
    assert {m["To"] for m in inbox.messages} == {"tia@hospital.example", "dr_task@hospital.example"}


def test_a_study_name_as_long_as_allowed_still_gets_its_mail_recorded(smtp, db):
    inbox, _ = smtp
    name = "A very long study name " + "x" * 177
    study = study_make(name=name, conversations=1)
    study.deadline = date(2027, 3, 10)
    study.save(update_fields=["deadline"])
    assignments_create(study=study, clinicians=[_clinician("dr_long")])
    assert mail.deadline_reminders_send(now=_at(date(2027, 3, 9))) == 1
    _arrived(inbox, 1)
    assert inbox.messages[0]["Subject"].strip().endswith("” is due tomorrow")
    (record,) = MailSent.objects.all()
    assert len(record.subject) == 200 and record.subject.startswith("[MentalBench] “A very long")
