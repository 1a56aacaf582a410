"""E-mail the platform sends of its own accord: an invitation with a set-password link, and a
reminder when a clinician's assigned work has not moved for the study's `remind_after_days`.

Sent by the upkeep worker (annotation.tasks), never from a web request, through Django's e-mail
backend (SMTP where EMAIL_HOST is set, the worker's log otherwise). Every message carries an
unsubscribe link, honoured at once (`MailPreference`), and is recorded once (`MailSent`). No
message names a responder or a system, nor another clinician: a study's name, a count of
conversations, and links.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

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

from ..models import Assignment, MailPreference, MailSent, Study
from ..tokens import password_token_generator

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
                user=user, kind=message.kind, key=message.key, subject=subject, study=message.study
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
    study, so a clinician who works again and pauses again is reminded again). Returns how
    many were sent."""
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
        waiting = Assignment.objects.filter(
            rater__user=user, conversation__study=study, status__in=Assignment.OPEN_STATUSES
        ).count()
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
