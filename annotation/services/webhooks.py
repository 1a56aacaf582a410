"""Webhooks: registering a hook, writing an event into the outbox in the transaction that made
it, and delivering the outbox with retries and exponential backoff (docs/webhooks.md).

Every app reports its events through `webhook_emit` (annotation is the lowest layer all of them
import). A payload holds ids and states only: never a clinician's or a user's name, never a
responder's (a blinded system's) key.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import requests
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from annotation.models import Study, Webhook, WebhookDelivery
from annotation.webhook_signing import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    signature_header,
)
from mentalbench import encryption
from mentalbench.encryption import ENCRYPTION_SETTING, EncryptionError

logger = logging.getLogger(__name__)

# A delivery being sent is someone's for this long; after it (a worker that died mid-send) the
# outbox sends it again. Longer than the request's timeout, so two workers never both send one.
LEASE_SECONDS = 60
# The start of a receiver's answer kept in the log.
ANSWER_CHARS = 1000


def webhook_create(
    *,
    url: str,
    events: list[str],
    study: Study | None,
    created_by: AbstractBaseUser | AnonymousUser | None,
) -> tuple[Webhook, str]:
    """(the hook, its secret): the secret is shown to the person once, now. The hook stores it
    encrypted; with no MENTALBENCH_ENCRYPTION_KEYS configured nothing is written and
    EncryptionError says so (the form refuses first, WebhookForm)."""
    secret = secrets.token_hex(32)
    hook = Webhook.objects.create(
        url=url,
        events=sorted(set(events)),
        study=study,
        secret=secret,
        created_by_id=getattr(created_by, "pk", None),
    )
    return hook, secret


def webhook_label(*, hook_id: int, url: str) -> str:
    """How messages name a hook: its id and its URL's host, never its secret or full URL."""
    return f"webhook {hook_id} ({urlsplit(url).hostname or 'no host'})"


def webhook_secret(*, webhook: Webhook) -> str:
    """The secret that signs `webhook`'s deliveries, decrypted now, for this one signature: it is
    never kept on the instance. EncryptionError when no configured key opens it."""
    stored = webhook.secret
    if not encryption.is_encrypted(stored):
        # A legacy secret stored before encryption, migrated while no key was configured: it
        # still signs, so receivers keep working, until `manage.py reencrypt_secrets` encrypts it.
        return stored
    label = webhook_label(hook_id=webhook.pk, url=webhook.url)
    return encryption.decrypt(stored=stored, what=f"the stored secret of {label}")


@transaction.atomic
def webhook_secrets_reencrypt() -> int:
    """Encrypt every hook's secret with the first configured key; returns how many were written.

    Secrets encrypted with any configured key are re-encrypted (rotation); a legacy plaintext
    one is encrypted. When any cannot be decrypted nothing is written and EncryptionError names
    the hooks (id and URL host). Locks the rows it rewrites.
    """
    encryption.multi_fernet()  # no key configured: say so before reading anything
    rows = list(
        Webhook.objects.select_for_update()
        .exclude(secret="")
        .order_by("id")
        .values_list("id", "url", "secret")
    )
    rewritten: dict[int, str] = {}
    unreadable: list[str] = []
    for hook_id, url, stored in rows:
        try:
            rewritten[hook_id] = encryption.reencrypt(stored=stored)
        except EncryptionError:
            unreadable.append(webhook_label(hook_id=hook_id, url=url))
    if unreadable:
        raise EncryptionError(
            f"nothing re-encrypted: the stored secret of {', '.join(unreadable)} cannot be "
            f"decrypted with any key in {ENCRYPTION_SETTING} (add the key it was encrypted with "
            "after the new one, or delete the hook and register it again)"
        )
    for hook_id, stored in rewritten.items():
        Webhook.objects.filter(id=hook_id).update(secret=stored)
    return len(rewritten)


def webhook_set_enabled(*, webhook: Webhook, enabled: bool) -> None:
    webhook.enabled = enabled
    webhook.save(update_fields=["enabled"])


def webhook_delete(*, webhook: Webhook) -> None:
    webhook.delete()


def _body(*, delivery_id: str, event: str, data: dict[str, Any]) -> str:
    return json.dumps(
        {"id": delivery_id, "event": event, "created_at": timezone.now().isoformat(), "data": data},
        sort_keys=True,
        separators=(",", ":"),
    )


def webhooks_any() -> bool:
    """Whether any hook is enabled: the check that keeps events cheap where nobody listens."""
    return Webhook.objects.filter(enabled=True).exists()


def webhook_emit(*, event: str, study_id: int | None, data: dict[str, Any]) -> int:
    """Write `event` into the outbox of every enabled hook that hears it (for this study, or for
    every study) and send them when the transaction commits; returns how many. Called inside the
    transaction that made the event: rolled back, nothing is sent."""
    hooks = Webhook.objects.filter(enabled=True, events__has_element=event)
    hooks = hooks.filter(Q(study__isnull=True) | Q(study_id=study_id))
    deliveries = []
    for hook in hooks:
        delivery = WebhookDelivery(webhook=hook, event=event)
        delivery.body = _body(delivery_id=str(delivery.pk), event=event, data=data)
        deliveries.append(delivery)
    if not deliveries:
        return 0
    WebhookDelivery.objects.bulk_create(deliveries)
    ids = [str(d.pk) for d in deliveries]

    def send() -> None:
        from annotation.tasks import webhook_deliver

        for delivery_id in ids:
            webhook_deliver.delay(delivery_id)

    transaction.on_commit(send)
    return len(deliveries)


def backoff_seconds(*, attempts: int) -> float:
    """The wait after the `attempts`-th failed attempt: doubling from
    WEBHOOK_RETRY_BASE_SECONDS, at most WEBHOOK_RETRY_MAX_SECONDS."""
    base = settings.WEBHOOK_RETRY_BASE_SECONDS
    return float(min(base * 2 ** max(attempts - 1, 0), settings.WEBHOOK_RETRY_MAX_SECONDS))


def _claim(delivery_id: str) -> WebhookDelivery | None:
    now = timezone.now()
    due = Q(status=WebhookDelivery.Status.PENDING, next_attempt_at__lte=now) | Q(
        status=WebhookDelivery.Status.SENDING, lease_until__lt=now
    )
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update(skip_locked=True)
            .filter(due, pk=delivery_id)
            .select_related("webhook")
            .first()
        )
        if delivery is None:
            return None
        delivery.status = WebhookDelivery.Status.SENDING
        delivery.lease_until = now + timedelta(seconds=LEASE_SECONDS)
        delivery.attempts += 1
        delivery.save(update_fields=["status", "lease_until", "attempts"])
    return delivery


def webhook_deliver(*, delivery_id: str) -> str | None:
    """Send one delivery if it is due and nobody else is sending it; returns its new status
    (None when it was not due). The request runs outside any transaction. A 2xx answer delivers
    it; anything else (an error status, a refused connection, a timeout) schedules the next
    attempt after `backoff_seconds`, until WEBHOOK_MAX_ATTEMPTS, when it is given up."""
    delivery = _claim(delivery_id)
    if delivery is None:
        return None
    hook = delivery.webhook
    body = delivery.body.encode()
    code: int | None = None
    answer = error = ""
    try:
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "MentalBench-Webhooks/1",
            EVENT_HEADER: delivery.event,
            DELIVERY_HEADER: str(delivery.pk),
            # Signed at each attempt: the timestamp says when this attempt was made.
            SIGNATURE_HEADER: signature_header(
                secret=webhook_secret(webhook=hook), body=body, timestamp=int(time.time())
            ),
        }
        response = requests.post(
            hook.url,
            data=body,
            headers=headers,
            timeout=settings.WEBHOOK_TIMEOUT_SECONDS,
            allow_redirects=False,
        )
        code, answer = response.status_code, response.text[:ANSWER_CHARS]
        ok = 200 <= code < 300
        if not ok:
            error = f"the receiver answered {code}"
    except requests.RequestException as exc:
        ok = False
        error = f"{type(exc).__name__}: {exc}"[:ANSWER_CHARS]
    except EncryptionError as exc:
        # Nothing is sent unsigned: the attempt fails and is retried (the key may come back).
        ok = False
        error = str(exc)[:ANSWER_CHARS]
    now = timezone.now()
    fields: dict[str, Any] = {
        "last_status_code": code,
        "last_response": answer,
        "last_error": error,
        "lease_until": None,
    }
    if ok:
        fields.update(status=WebhookDelivery.Status.DELIVERED, delivered_at=now)
    elif delivery.attempts >= settings.WEBHOOK_MAX_ATTEMPTS:
        fields.update(status=WebhookDelivery.Status.FAILED)
    else:
        fields.update(
            status=WebhookDelivery.Status.PENDING,
            next_attempt_at=now + timedelta(seconds=backoff_seconds(attempts=delivery.attempts)),
        )
    WebhookDelivery.objects.filter(pk=delivery.pk, status=WebhookDelivery.Status.SENDING).update(
        **fields
    )
    return str(fields["status"])


def webhooks_deliver_due(*, limit: int = 200) -> int:
    """The outbox's sweep (Celery beat): send every delivery that is due — retries whose wait is
    over, and deliveries whose task was lost (a restart before it ran, a worker that died while
    sending). Returns how many were tried."""
    now = timezone.now()
    due = WebhookDelivery.objects.filter(
        Q(status=WebhookDelivery.Status.PENDING, next_attempt_at__lte=now)
        | Q(status=WebhookDelivery.Status.SENDING, lease_until__lt=now)
    ).order_by("next_attempt_at")
    tried = 0
    for delivery_id in due.values_list("pk", flat=True)[:limit]:
        if webhook_deliver(delivery_id=str(delivery_id)) is not None:
            tried += 1
    return tried
