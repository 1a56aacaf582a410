"""Celery tasks of the annotation app: thin, idempotent, JSON arguments only; the work is in
annotation.services.mail (e-mail) and annotation.services.webhooks. They run on the upkeep
queue (settings.CELERY_TASK_ROUTES)."""

from smtplib import SMTPException

from celery import shared_task

from .services import mail, webhooks

# A relay that is briefly unreachable: try again a little later, a few times. A message is
# recorded only once the relay took it, so a retry never sends one twice.
_RETRY = {
    "autoretry_for": (SMTPException, ConnectionError, TimeoutError),
    "retry_backoff": 10,
    "max_retries": 5,
}


@shared_task(ignore_result=True, **_RETRY)
def invitation_mail_send(user_id: int, study_id: int | None = None) -> None:
    mail.invitation_send(user_id=user_id, study_id=study_id)


@shared_task(ignore_result=True, **_RETRY)
def escalation_mail_send(escalation_id: int) -> None:
    """The leads' e-mail about a response marked unsafe, enqueued when the escalation commits.
    Sent once per lead (MailSent), so a retry or a redelivery sends only what had not gone."""
    mail.escalation_mails_send(escalation_id=escalation_id)


@shared_task(ignore_result=True, **_RETRY)
def reminders_send() -> None:
    """Periodic (Celery beat): remind clinicians whose assigned work has paused or whose study's
    deadline is near or passed, and send the leads' weekly digests. Each message is sent once
    (MailSent), so a retry after a relay failure sends only what had not gone yet."""
    mail.reminders_send()
    mail.deadline_reminders_send()
    mail.lead_digests_send()


@shared_task(ignore_result=True)
def webhook_deliver(delivery_id: str) -> None:
    """Send one delivery (its first attempt, right after the event commits). A delivery that is
    not due (already delivered, or being sent) is left alone. Dies with its worker: the
    delivery's lease runs out and the outbox sweep sends it again."""
    webhooks.webhook_deliver(delivery_id=delivery_id)


@shared_task(ignore_result=True)
def webhooks_deliver_due() -> None:
    """Periodic (Celery beat, mentalbench/celery.py): send every delivery whose retry is due or
    whose task was lost. Idempotent; an expired sweep is done by the next one."""
    webhooks.webhooks_deliver_due()
