"""Webhooks: the signature, the outbox against a receiver on loopback that is down for a while
(exactly one signed delivery once it is back), backoff, lost tasks, what payloads carry, and the
admins' pages."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.urls import reverse
from django.utils import timezone

from annotation.models import Assignment, Webhook, WebhookDelivery
from annotation.services.rating import submitted_emit
from annotation.services.webhooks import (
    backoff_seconds,
    webhook_create,
    webhook_emit,
    webhook_secret,
    webhooks_deliver_due,
)
from annotation.webhook_signing import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    signature_header,
    signature_verify,
)
from tests.factories import endpoint_make, small_study_make


class Receiver:
    """An HTTP server on loopback that records each POST; stop() takes it down (connections are
    refused), start() brings it back on the same port."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.port = 0
        self.server: ThreadingHTTPServer | None = None

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers), body))
                self.send_response(receiver.status)
                self.end_headers()
                self.wfile.write(b"thanks")

            def log_message(self, *args: object) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/mentalbench"


@pytest.fixture
def receiver():
    server = Receiver().start()
    yield server
    server.stop()


@pytest.fixture
def eager(django_capture_on_commit_callbacks):
    """Tasks run in the test process when the transaction commits, as a worker would run them."""
    from mentalbench.celery import app

    saved = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield django_capture_on_commit_callbacks
    app.conf.task_always_eager = saved


def test_a_signature_verifies_and_a_changed_body_or_old_timestamp_does_not():
    body = b'{"event":"run.finished"}'
    now = int(time.time())
    header = signature_header(secret="s3cret", body=body, timestamp=now)
    assert signature_verify(secret="s3cret", body=body, header=header)
    assert not signature_verify(secret="other", body=body, header=header)
    assert not signature_verify(secret="s3cret", body=body + b" ", header=header)
    assert not signature_verify(secret="s3cret", body=body, header=header, now=now + 301)
    assert not signature_verify(secret="s3cret", body=body, header="garbage")


def test_backoff_doubles_up_to_its_maximum(settings):
    settings.WEBHOOK_RETRY_BASE_SECONDS = 10
    settings.WEBHOOK_RETRY_MAX_SECONDS = 100
    assert [backoff_seconds(attempts=n) for n in range(1, 6)] == [10, 20, 40, 80, 100]


def _finish_a_run():
    """A judge run with nothing left open, settled by the service every worker loop calls."""
    from judging.models import Run
    from judging.services import run_finalize

    study = small_study_make().study
    endpoint = endpoint_make(base_url="http://127.0.0.1:9/v1")
    run = Run.objects.create(study=study, endpoint=endpoint, kind="judge", status="running")
    run_finalize(run_id=run.pk)
    return run


def test_a_run_that_finishes_while_the_receiver_is_down_is_delivered_once_it_is_back(
    db, receiver, eager, settings
):
    settings.WEBHOOK_RETRY_BASE_SECONDS = 0.2
    settings.WEBHOOK_RETRY_MAX_SECONDS = 0.4
    settings.WEBHOOK_TIMEOUT_SECONDS = 2
    hook, secret = webhook_create(
        url=receiver.url, events=[Webhook.Event.RUN_FINISHED], study=None, created_by=None
    )
    receiver.stop()  # down: connections to its port are refused
    with eager(execute=True):
        run = _finish_a_run()
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == "pending" and delivery.attempts == 1
    assert "ConnectionError" in delivery.last_error
    # Retries while it is down fail too, each after a longer wait.
    for _ in range(3):
        time.sleep(0.45)
        webhooks_deliver_due()
    delivery.refresh_from_db()
    assert delivery.attempts == 4 and delivery.status == "pending" and not receiver.received

    receiver.start()  # back, on the same port
    deadline = time.monotonic() + 10
    while not receiver.received and time.monotonic() < deadline:
        time.sleep(0.1)
        webhooks_deliver_due()
    for _ in range(5):  # more sweeps send nothing more
        time.sleep(0.1)
        webhooks_deliver_due()
    assert len(receiver.received) == 1
    headers, body = receiver.received[0]
    assert signature_verify(secret=secret, body=body, header=headers[SIGNATURE_HEADER])
    payload = json.loads(body)
    assert payload["event"] == "run.finished" and payload["id"] == headers[DELIVERY_HEADER]
    assert payload["data"]["run"] == run.pk and payload["data"]["status"] == "done"
    delivery.refresh_from_db()
    assert delivery.status == "delivered" and delivery.last_status_code == 200
    assert delivery.last_response == "thanks"


def test_a_delivery_whose_task_was_lost_is_sent_by_the_outbox_sweep(db, receiver):
    hook, secret = webhook_create(
        url=receiver.url, events=[Webhook.Event.RELEASE_READY], study=None, created_by=None
    )
    # The transaction commits but its task is never run (a restart in between): the row stays.
    webhook_emit(event=Webhook.Event.RELEASE_READY, study_id=None, data={"study": 1})
    assert WebhookDelivery.objects.get().status == "pending" and not receiver.received
    assert webhooks_deliver_due() == 1
    assert len(receiver.received) == 1 and WebhookDelivery.objects.get().status == "delivered"
    assert webhooks_deliver_due() == 0


def test_a_receiver_that_keeps_refusing_is_given_up_after_the_last_attempt(db, settings):
    settings.WEBHOOK_MAX_ATTEMPTS = 2
    settings.WEBHOOK_RETRY_BASE_SECONDS = 0.01
    refusing = Receiver(status=500).start()
    try:
        webhook_create(url=refusing.url, events=["release.ready"], study=None, created_by=None)
        webhook_emit(event="release.ready", study_id=None, data={})
        webhooks_deliver_due()
        time.sleep(0.05)
        webhooks_deliver_due()
    finally:
        refusing.stop()
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == "failed" and delivery.attempts == 2
    assert delivery.last_status_code == 500 and "answered 500" in delivery.last_error


def test_only_hooks_of_the_event_and_the_study_get_it(db):
    study = small_study_make().study
    webhook_create(url="https://a.example/", events=["run.finished"], study=None, created_by=None)
    webhook_create(url="https://b.example/", events=["run.failed"], study=None, created_by=None)
    webhook_create(url="https://c.example/", events=["run.finished"], study=study, created_by=None)
    assert webhook_emit(event="run.finished", study_id=study.pk + 1, data={}) == 1
    assert webhook_emit(event="run.finished", study_id=study.pk, data={}) == 2
    paused = Webhook.objects.get(url="https://a.example/")
    paused.enabled = False
    paused.save()
    assert webhook_emit(event="run.finished", study_id=study.pk, data={}) == 1


def test_a_submitted_task_and_the_study_target_carry_ids_only(db):
    small = small_study_make()
    webhook_create(
        url="https://lab.example/",
        events=["assignment.submitted", "study.target_reached"],
        study=None,
        created_by=None,
    )
    assignments = list(Assignment.objects.filter(conversation__study=small.study))
    Assignment.objects.filter(pk=assignments[0].pk).update(status="in_progress")
    submitted_emit(assignment=assignments[1])
    assert list(WebhookDelivery.objects.values_list("event", flat=True)) == ["assignment.submitted"]
    Assignment.objects.filter(pk=assignments[0].pk).update(status="submitted")
    submitted_emit(assignment=assignments[0])
    events = sorted(WebhookDelivery.objects.values_list("event", flat=True))
    assert events == ["assignment.submitted", "assignment.submitted", "study.target_reached"]
    names = {r.name for r in small.clinicians} | {r.user.username for r in small.clinicians}
    names |= {r.name for r in small.judges}
    for body in WebhookDelivery.objects.values_list("body", flat=True):
        assert not any(name in body for name in names), body
        assert set(json.loads(body)["data"]) <= {
            "study", "assignment", "conversation", "rater", "kind", "submitted"
        }  # fmt: skip


def test_admins_add_a_webhook_and_see_its_secret_once(client, admin_member, researcher):
    client.force_login(admin_member)
    response = client.post(
        reverse("annotation:manage_webhooks"),
        {"url": "https://lab.example/hook", "events": ["run.finished", "release.ready"]},
    )
    assert response.status_code == 200
    hook = Webhook.objects.get()
    html = response.content.decode()
    secret = webhook_secret(webhook=hook)
    assert secret in html and "not shown again" in html
    assert secret not in client.get(reverse("annotation:manage_webhooks")).content.decode()
    detail = client.get(reverse("annotation:manage_webhook", args=[hook.pk])).content.decode()
    assert secret not in detail and hook.secret not in detail and "Nothing sent yet" in detail
    client.post(reverse("annotation:manage_webhook_toggle", args=[hook.pk]))
    hook.refresh_from_db()
    assert not hook.enabled
    client.force_login(researcher)
    assert client.get(reverse("annotation:manage_webhooks")).status_code == 403
    client.force_login(admin_member)
    client.post(reverse("annotation:manage_webhook_delete", args=[hook.pk]))
    assert not Webhook.objects.exists()


def test_the_release_job_announces_itself(db, researcher):
    from analysis.jobs.kinds import release_params
    from analysis.jobs.services import job_digest, job_execute, job_start
    from analysis.models import Job

    study = small_study_make().study
    webhook_create(
        url="https://lab.example/", events=["release.ready"], study=None, created_by=None
    )
    params = release_params(study=study, include_text=False)
    job, _ = job_start(
        owner=researcher,
        kind=Job.Kind.RELEASE,
        params=params,
        digest=job_digest(kind=Job.Kind.RELEASE, params=params),
        study=study,
    )
    job_execute(job_id=str(job.pk))
    payload = json.loads(WebhookDelivery.objects.get().body)
    assert payload["event"] == "release.ready"
    assert payload["data"]["job"] == str(job.pk) and payload["data"]["study"] == study.pk
    assert timezone.now().isoformat()[:4] in payload["data"]["expires_at"]
