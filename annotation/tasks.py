"""Celery tasks of webhooks: thin, idempotent, JSON arguments only; the work is in
annotation.services.webhooks."""

from celery import shared_task

from annotation.services import webhooks


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
