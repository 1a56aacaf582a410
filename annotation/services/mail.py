"""E-mail the platform sends of its own accord: an invitation with a set-password link, a
reminder when a clinician's assigned work has not moved for the study's `remind_after_days`, a
reminder before a study's deadline (and once after it passed), a weekly digest of a study's
progress to its leads, and, at once, a note to its leads when a clinician marks a response unsafe.

Sent by the upkeep worker (annotation.tasks), never from a web request, through Django's e-mail
backend (SMTP where EMAIL_HOST is set, the worker's log otherwise). Every message carries an
unsubscribe link, honoured at once (`MailPreference`), and is recorded once (`MailSent`). No
message names a responder or a system, nor another clinician: a study's name, counts of
conversations (and, to a lead, of clinicians per site), dates, and links.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core import signing
from django.core.mail import EmailMessage
from django.db import IntegrityError, transaction
from django.db.models import Max, Q
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from accounts.tokens import password_token_generator

from ..models import Assignment, Escalation, MailPreference, MailSent, Study, StudyMember
from ..team_selectors import NO_SITE, SiteRow, TeamProgress, conversations_progress, team_progress

logger = logging.getLogger(__name__)

UNSUBSCRIBE_SALT = "mentalbench.mail.unsubscribe"


def unsubscribe_token(*, user_id: int) -> str:
    """A signed, non-expiring token naming the account: the link works from any old message."""
    return signing.dumps(user_id, salt=UNSUBSCRIBE_SALT)


def unsubscribe_user_id(*, token: str) -> int | None:
    try:
        value = signing.loads(token, salt=UNSUBSCRIBE_SALT)
    except signing.BadSignature:
        return None
    return value if isinstance(value, int) else None


def unsubscribe(*, user_id: int) -> bool:
    """Stop every e-mail the platform sends of its own accord to this account, from now on.
    Returns False for an account that no longer exists."""
    if not get_user_model().objects.filter(pk=user_id).exists():
        return False
    preference, _ = MailPreference.objects.get_or_create(user_id=user_id)
    if preference.unsubscribed_at is None:
        preference.unsubscribed_at = timezone.now()
        preference.save(update_fields=["unsubscribed_at"])
    return True


def mail_wanted(*, user: User) -> bool:
    """An active account with an address that has not unsubscribed."""
    return bool(
        user.is_active
        and getattr(user, "email", "")
        and not MailPreference.objects.filter(user=user, unsubscribed_at__isnull=False).exists()
    )


def _site(path: str) -> str:
    return settings.SITE_URL.rstrip("/") + path


@dataclass(frozen=True)
class _Message:
    kind: str
    key: str
    subject: str
    body: str
    study: Study | None = None


def _send_once(user: User, message: _Message) -> bool:
    """Record and send `message` to `user` unless sent before under the same key or the person
    unsubscribed; returns whether it was sent.

    The record and the send commit together: a send that fails (the relay refused it) leaves
    no record, so the task's retry sends it; a worker killed after the relay took the message
    but before the commit sends it again on redelivery (at least once, never silently lost).
    """
    if not mail_wanted(user=user):
        return False
    unsubscribe_url = _site(
        reverse("annotation:unsubscribe", kwargs={"token": unsubscribe_token(user_id=user.pk)})
    )
    body = (
        f"{message.body}\n\n--\nYou receive this because an administrator of the MentalBench "
        f"platform at {settings.SITE_URL} gave you an account. To receive no more e-mail "
        f"from it: {unsubscribe_url}\n"
    )
    subject = settings.ACCOUNT_EMAIL_SUBJECT_PREFIX + message.subject
    try:
        with transaction.atomic():
            MailSent.objects.create(
                user=user,
                kind=message.kind,
                key=message.key,
                # A study's name may take the whole field: the record keeps the subject's start.
                subject=subject[: MailSent._meta.get_field("subject").max_length],
                study=message.study,
            )
            EmailMessage(
                subject,
                body,
                to=[user.email],
                # One-click unsubscribe (RFC 8058): mail clients offer it beside the sender.
                headers={
                    "List-Unsubscribe": f"<{unsubscribe_url}>",
                    "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
                },
            ).send()
    except IntegrityError:
        return False  # sent before (another check, or a redelivered task)
    logger.info("%s e-mail sent to account %s", message.kind, user.pk)
    return True


def invitation_send(*, user_id: int, study_id: int | None = None) -> bool:
    """The invitation of a new clinician account: a link to set a password (one use; as the
    link the admin sees, any use voids the other) and where the work will be."""
    user = get_user_model().objects.filter(pk=user_id).first()
    if user is None or user.has_usable_password():
        return False  # gone, or the password is set already: the invitation has done its work
    study = Study.objects.filter(pk=study_id).first() if study_id else None
    uidb64 = urlsafe_base64_encode(force_bytes(user.pk))
    token = password_token_generator.make_token(user)
    link = _site(reverse("annotation:password_set", kwargs={"uidb64": uidb64, "token": token}))
    where = f" to rate responses in the study “{study.name}”" if study else ""
    body = (
        f"Hello,\n\nYou are invited to the MentalBench evaluation platform{where}. Your "
        f"username is {user.get_username()}.\n\nSet your password here (the link works once, "
        f"for {settings.PASSWORD_RESET_TIMEOUT // 3600} hours):\n{link}\n\nThen sign in at "
        f"{_site(reverse('account_login'))} to see your work."
    )
    return _send_once(
        user,
        _Message(
            MailSent.Kind.INVITATION,
            key=f"invitation:{user.pk}",
            subject="Your invitation to rate responses",
            body=body,
            study=study,
        ),
    )


def reminders_send(*, now: datetime | None = None) -> int:
    """One reminder to each clinician whose open work in a study has not moved for the study's
    `remind_after_days`: once per pause (the key is the time of their last progress in that
    study, so a clinician who works again and pauses again is reminded again). Work that waits
    on the clinician's training result (a practice round the lead has still to decide) is not
    theirs to do and is neither counted nor reminded of. Returns how many were sent."""
    from ..training import waiting_for_training_q  # training imports the services' neighbours

    now = now or timezone.now()
    activity = Coalesce("last_activity_at", "submitted_at", "started_at", "created_at")
    stalled = (
        Assignment.objects.filter(
            conversation__study__remind_after_days__gt=0,
            rater__user__isnull=False,
            rater__user__is_active=True,
        )
        .values(
            "rater__user_id", "conversation__study_id", "conversation__study__remind_after_days"
        )
        .annotate(last=Max(activity), open=Max("id", filter=Q(status__in=Assignment.OPEN_STATUSES)))
        .filter(open__isnull=False)
    )
    sent = 0
    User = get_user_model()
    for row in stalled:
        days = row["conversation__study__remind_after_days"]
        if row["last"] > now - timedelta(days=days):
            continue
        user = User.objects.get(pk=row["rater__user_id"])
        study = Study.objects.get(pk=row["conversation__study_id"])
        waiting = (
            Assignment.objects.filter(
                rater__user=user, conversation__study=study, status__in=Assignment.OPEN_STATUSES
            )
            .exclude(waiting_for_training_q(user=user))
            .count()
        )
        if not waiting:
            continue
        body = (
            f"Hello {user.get_username()},\n\n{waiting} task{'s' if waiting != 1 else ''} "
            f"assigned to you in the study “{study.name}” {'are' if waiting != 1 else 'is'} "
            f"waiting; nothing has moved for {days} days. Your drafts are kept: continue "
            f"where you stopped at {_site(reverse('annotation:queue'))}"
        )
        sent += _send_once(
            user,
            _Message(
                MailSent.Kind.REMINDER,
                key=f"reminder:{study.pk}:{row['last'].isoformat()}",
                subject=f"Your work in “{study.name}” is waiting",
                body=body,
                study=study,
            ),
        )
    return sent


# --- Deadlines and the leads' digest -------------------------------------------------------------

#: A deadline that passed longer ago than this gets no "deadline passed" e-mail: the check catches
#: up after a worker was down for days, but a study whose deadline is long past (or the first
#: check after this feature is deployed) does not greet its clinicians with old news.
DEADLINE_PASSED_WITHIN_DAYS = 7


def _real_work(study: Study):
    """A study's assignments that count as work: neither practice nor reclaimed (reclaimed work
    went to someone else)."""
    return (
        Assignment.objects.filter(conversation__study=study, conversation__practice=False)
        .exclude(kind=Assignment.Kind.PRACTICE)
        .exclude(status=Assignment.Status.RECLAIMED)
    )


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _day(value: date) -> str:
    return f"{value:%A} {value.day} {value:%B %Y}"


def deadline_reminders_send(*, now: datetime | None = None) -> int:
    """E-mail each clinician with open work in a study whose deadline is near: once when it is
    `MAIL_DEADLINE_REMIND_DAYS` days away or less (not after it), and, with
    `MAIL_DEADLINE_PASSED`, once after it passed with work still open. Each is recorded under
    the study and the deadline's date, so a moved deadline is announced again, an unchanged one
    never twice. Work that waits on the clinician's training result is not theirs to do yet and
    is not counted. Returns how many were sent."""
    from ..training import waiting_for_training_q  # training imports the services' neighbours

    now = now or timezone.now()
    today = timezone.localdate(now)
    before = settings.MAIL_DEADLINE_REMIND_DAYS
    nothing = Q(pk__in=[])
    due = Q(deadline__gte=today, deadline__lte=today + timedelta(days=before))
    passed = Q(
        deadline__lt=today, deadline__gte=today - timedelta(days=DEADLINE_PASSED_WITHIN_DAYS)
    )
    wanted = (due if before else nothing) | (passed if settings.MAIL_DEADLINE_PASSED else nothing)
    sent = 0
    User = get_user_model()
    queue = _site(reverse("annotation:queue"))
    for study in Study.objects.filter(deadline__isnull=False).filter(wanted).order_by("pk"):
        deadline = study.deadline
        assert deadline is not None  # filtered above; for the type checker
        open_work = _real_work(study).filter(
            status__in=Assignment.OPEN_STATUSES,
            rater__user__isnull=False,
            rater__user__is_active=True,
        )
        user_ids = sorted(set(open_work.values_list("rater__user_id", flat=True)))
        for user in User.objects.filter(pk__in=user_ids).order_by("pk"):
            waiting = (
                open_work.filter(rater__user=user)
                .exclude(waiting_for_training_q(user=user))
                .values("conversation_id")
                .distinct()
                .count()
            )
            if not waiting:
                continue
            conversations = _plural(waiting, "conversation")
            if deadline >= today:
                left = deadline - today
                when = (
                    "today"
                    if not left.days
                    else "tomorrow"
                    if left.days == 1
                    else f"in {left.days} days"
                )
                message = _Message(
                    MailSent.Kind.DEADLINE,
                    key=f"deadline:{study.pk}:{deadline.isoformat()}",
                    subject=f"“{study.name}” is due {when}",
                    body=(
                        f"Hello {user.get_username()},\n\nThe study “{study.name}” is due on "
                        f"{_day(deadline)} ({when}). {conversations} assigned to you in it "
                        f"{'is' if waiting == 1 else 'are'} still open. Your drafts are kept: "
                        f"continue at {queue}"
                    ),
                    study=study,
                )
            else:
                message = _Message(
                    MailSent.Kind.DEADLINE_PASSED,
                    key=f"deadline_passed:{study.pk}:{deadline.isoformat()}",
                    subject=f"The deadline of “{study.name}” has passed",
                    body=(
                        f"Hello {user.get_username()},\n\nThe study “{study.name}” was due on "
                        f"{_day(deadline)}; {conversations} assigned to you in it "
                        f"{'is' if waiting == 1 else 'are'} still open. If you can still finish "
                        f"{'it' if waiting == 1 else 'them'}, your drafts are kept at {queue}"
                    ),
                    study=study,
                )
            sent += _send_once(user, message)
    return sent


def _progress_lines(site: SiteRow) -> list[str]:
    """One site's (or every site's) counts, as the team page counts them (team_progress)."""
    return [
        f"  tasks (one conversation for one clinician): {site.assigned} assigned, "
        f"{site.submitted} submitted ({site.submitted_week} in the last 7 days), "
        f"{site.open} open, {site.flagged} flagged",
        f"  clinicians: {site.clinicians}; not started: {site.not_started}; "
        f"overdue: {site.overdue}",
    ]


def lead_digests_send(*, now: datetime | None = None) -> int:
    """With `MAIL_LEAD_DIGEST`, one e-mail per ISO week to each lead of each study that has work
    assigned (`StudyMember` role lead): its progress, as counts, overall and per site. The
    first check of a week sends it (Mondays, soon after midnight, while the worker runs);
    recorded under the study and the week. Returns how many were sent."""
    if not settings.MAIL_LEAD_DIGEST:
        return 0
    now = now or timezone.now()
    year, week, _ = timezone.localdate(now).isocalendar()
    leads = (
        StudyMember.objects.filter(role=StudyMember.Role.LEAD, user__is_active=True)
        .select_related("study", "user")
        .order_by("study_id", "user_id")
    )
    sent = 0
    progress: dict[int, tuple[TeamProgress, tuple[int, int]]] = {}
    for member in leads:
        study = member.study
        if study.pk not in progress:
            progress[study.pk] = (
                team_progress(study=study, now=now),
                conversations_progress(study=study),
            )
        report, (given, done) = progress[study.pk]
        if not report.total.assigned and not report.total.flagged:
            continue  # nothing assigned yet: nothing to report
        due = f"Deadline: {_day(study.deadline)}." if study.deadline else "No deadline is set."
        parts = [
            f"Hello {member.user.get_username()},\n\nThe week's progress of the study "
            f"“{study.name}”, which you lead. {due}\n",
            f"Conversations given to clinicians: {given}, of which {done} are done "
            "(every task submitted).\n",
            "All sites:",
            *_progress_lines(report.total),
        ]
        if len(report.sites) > 1 or report.sites[0].site != NO_SITE:
            for site in report.sites:
                parts += ["", f"{site.site}:", *_progress_lines(site)]
        parts.append(
            "\nThe study's pages: "
            + _site(reverse("analysis:dashboard", kwargs={"study_id": study.pk}))
        )
        sent += _send_once(
            member.user,
            _Message(
                MailSent.Kind.DIGEST,
                key=f"digest:{study.pk}:{year}-W{week:02d}",
                subject=f"Weekly progress of “{study.name}”",
                body="\n".join(parts),
                study=study,
            ),
        )
    return sent


def escalation_mails_send(*, escalation_id: int) -> int:
    """Tell each lead of the study (`StudyMember` role lead, active accounts) that a clinician
    marked a response unsafe: the study, the conversation's id in it, how many escalations are
    open, and the adjudication queue's address. Neither the clinician, the responder nor the
    reason's text is in the message (the reason is on the queue, behind sign-in). Sent once per
    escalation and lead; nothing for one withdrawn or decided before the worker got to it.
    Returns how many were sent."""
    escalation = (
        Escalation.objects.select_related("study", "assignment__conversation")
        .filter(pk=escalation_id, status=Escalation.Status.OPEN)
        .first()
    )
    if escalation is None:
        return 0
    study = escalation.study
    open_count = Escalation.objects.filter(study=study, status=Escalation.Status.OPEN).count()
    queue = _site(reverse("annotation:adjudicate_queue", kwargs={"study_id": study.pk}))
    leads = (
        StudyMember.objects.filter(study=study, role=StudyMember.Role.LEAD, user__is_active=True)
        .select_related("user")
        .order_by("user_id")
    )
    sent = 0
    for member in leads:
        body = (
            f"Hello {member.user.get_username()},\n\nA clinician marked a response unsafe in "
            f"the study “{study.name}”, which you lead (conversation "
            f"{escalation.assignment.conversation.external_id}). It heads the study's "
            f"adjudication queue, with the clinician's reason, until an adjudicator decides it. "
            f"{_plural(open_count, 'escalation')} of the study "
            f"{'is' if open_count == 1 else 'are'} open now.\n\nThe queue: {queue}"
        )
        sent += _send_once(
            member.user,
            _Message(
                MailSent.Kind.ESCALATION,
                key=f"escalation:{escalation.pk}",
                subject=f"A response in “{study.name}” was marked unsafe",
                body=body,
                study=study,
            ),
        )
    return sent
