"""Escalation (docs/adjudication.md, *Escalation*): a clinician marks a response unsafe and
withdraws it; refusals write nothing; the escalation heads the adjudication queue, blinded; an
adjudicator decides it; the lead is told on their pages, by e-mail (to leads only) and through
the `escalation.opened` webhook event, whose body names nobody."""

from __future__ import annotations

import json
import random
import re

import pytest
from django.test import Client

from accounts.roles import ADMIN
from annotation.membership import ADJUDICATOR, LEAD, member_add
from annotation.models import (
    Assignment,
    AssignmentItem,
    Escalation,
    MailPreference,
    Rating,
    RatingChange,
    Response,
    Webhook,
    WebhookDelivery,
)
from annotation.services import assignments_create, rating_save
from annotation.services.consent import consent_text_publish
from annotation.services.escalation import (
    EscalationRefused,
    escalation_decide,
    escalation_mark,
)
from annotation.services.webhooks import webhook_create
from tests.factories import clinician_make, study_make, user_make

pytestmark = pytest.mark.django_db

HX = {"HX-Request": "true"}


@pytest.fixture
def eager(django_capture_on_commit_callbacks):
    """Tasks run in the test process when the transaction commits, as the worker would."""
    from mentalbench.celery import app

    saved = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield django_capture_on_commit_callbacks
    app.conf.task_always_eager = saved


@pytest.fixture
def setup(db):
    """A study of two conversations, both given to two clinicians (with e-mail addresses), who
    disagree on one response; two leads, an adjudicator, and another study with its own."""
    study = study_make(name="Escalated study", conversations=2)
    a = clinician_make(username="dr_alfa_name")
    b = clinician_make(username="dr_bravo_name")
    for rater, address in ((a, "alfa@hospital.example"), (b, "bravo@hospital.example")):
        rater.user.email = address
        rater.user.save(update_fields=["email"])
    assignments_create(
        study=study, clinicians=[a, b], overlap=2, overlap_fraction=1.0, seed_rng=random.Random(3)
    )
    leads = [
        member_add(study=study, user=user_make(username=name, email=f"{name}@x.example"), role=LEAD)
        for name in ("lead_one", "lead_two")
    ]
    adjudicator = user_make(username="adj_person", email="adj@x.example")
    member_add(study=study, user=adjudicator, role=ADJUDICATOR)
    other = study_make(name="Other study", conversations=1)
    elsewhere = user_make(username="adj_elsewhere")
    member_add(study=other, user=elsewhere, role=ADJUDICATOR)
    c0 = {
        x.rater_id: x for x in Assignment.objects.filter(conversation__external_id="c0",
                                                          conversation__study=study)
    }  # fmt: skip
    return {
        "study": study,
        "raters": (a, b),
        "tasks": (c0[a.pk], c0[b.pk]),
        "leads": [m.user for m in leads],
        "adjudicator": adjudicator,
        "elsewhere": elsewhere,
        "other": other,
    }


def _item(assignment: Assignment, position: int = 0) -> AssignmentItem:
    return assignment.items.get(position=position)


def _signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _names(setup) -> set[str]:
    """What must never reach an adjudicator, a lead's e-mail or a webhook: the clinicians'
    names, and which system wrote a response (keys, names, model ids in metadata)."""
    names = {r.name for r in setup["raters"]} | {r.user.username for r in setup["raters"]}
    for response in Response.objects.filter(conversation__study=setup["study"]).select_related(
        "responder"
    ):
        names |= {response.responder.key, response.responder.name, response.metadata["model"]}
    return names


# --- The clinician's side -----------------------------------------------------------------------


def test_a_clinician_marks_a_response_unsafe_and_withdraws_it_without_javascript(setup):
    a = setup["raters"][0]
    task = setup["tasks"][0]
    item = _item(task, 1)
    client = _signed_in(a.user)
    url = f"/rate/{task.token}/unsafe"

    response = client.post(url, {"item": item.token, "reason": "  Tells the user to stop meds. "})
    assert response.status_code == 302
    assert response["Location"] == f"/rate/{task.token}/#response-1"
    (escalation,) = Escalation.objects.all()
    assert (escalation.response_id, escalation.rater_id, escalation.status) == (
        item.response_id, a.pk, Escalation.Status.OPEN,
    )  # fmt: skip
    assert escalation.reason == "Tells the user to stop meds."
    page = client.get(f"/rate/{task.token}/").content.decode()
    assert "Marked unsafe" in page and "Tells the user to stop meds." in page
    assert "Withdraw the unsafe mark on Response B" in page
    task.refresh_from_db()
    assert task.status == Assignment.Status.IN_PROGRESS  # marking is work on the task

    # The same mark again writes nothing; a new reason replaces the old (audited each time).
    client.post(url, {"item": item.token, "reason": "Tells the user to stop meds."})
    assert RatingChange.objects.filter(field="unsafe").count() == 1
    client.post(url, {"item": item.token, "reason": "Advises stopping medication abruptly."})
    escalation.refresh_from_db()
    assert escalation.reason == "Advises stopping medication abruptly."
    assert Escalation.objects.count() == 1

    response = client.post(url, {"item": item.token, "action": "withdraw"})
    assert response.status_code == 302
    escalation.refresh_from_db()
    assert escalation.status == Escalation.Status.WITHDRAWN and escalation.withdrawn_at
    assert "Marked unsafe" not in client.get(f"/rate/{task.token}/").content.decode()
    # A second withdraw (another tab) does nothing.
    assert client.post(url, {"item": item.token, "action": "withdraw"}).status_code == 302
    audit = list(RatingChange.objects.filter(field="unsafe").values_list("old_value", "new_value"))
    assert audit == [
        ("", "Tells the user to stop meds."),
        ("Tells the user to stop meds.", "Advises stopping medication abruptly."),
        ("Advises stopping medication abruptly.", ""),
    ]
    rating = Rating.objects.get(rater=a, response_id=item.response_id)
    assert rating.status == Rating.Status.DRAFT  # the audit rides on the clinician's own rating
    # Marked again after a withdrawal: a new escalation, the old one kept for the record.
    client.post(url, {"item": item.token, "reason": "Unsafe after all."})
    assert list(Escalation.objects.order_by("pk").values_list("status", flat=True)) == [
        "withdrawn", "open",
    ]  # fmt: skip


def test_the_page_script_gets_the_block_back_with_why_when_refused(setup):
    a = setup["raters"][0]
    task = setup["tasks"][0]
    item = _item(task)
    client = _signed_in(a.user)
    url = f"/rate/{task.token}/unsafe"
    response = client.post(url, {"item": item.token, "reason": "Harmful."}, headers=HX)
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<div class="unsafe marked" id="unsafe-0"')
    assert "Withdraw the unsafe mark on Response A" in html
    response = client.post(url, {"item": _item(task, 1).token, "reason": "   "}, headers=HX)
    assert response.status_code == 400
    assert "say why this response is unsafe" in response.content.decode()
    assert 'aria-invalid="true"' in response.content.decode()
    assert Escalation.objects.count() == 1


def test_refusals_write_nothing(setup):
    a, b = setup["raters"]
    task, b_task = setup["tasks"]
    item = _item(task)
    client = _signed_in(a.user)
    url = f"/rate/{task.token}/unsafe"

    # No reason: the page again, the reason asked for beside the response.
    response = client.post(url, {"item": item.token, "reason": ""})
    assert response.status_code == 400
    assert "say why this response is unsafe" in response.content.decode()
    # A response that is not in this task (the other clinician's item token).
    response = client.post(url, {"item": _item(b_task).token, "reason": "x"}, headers=HX)
    assert response.status_code == 400 and "unknown response" in response.content.decode()
    # Another clinician's task: it does not exist for them.
    assert _signed_in(b.user).post(url, {"item": item.token, "reason": "x"}).status_code == 404
    # A submitted task takes no more marks (as no more scores).
    Assignment.objects.filter(pk=task.pk).update(status=Assignment.Status.SUBMITTED)
    response = client.post(url, {"item": item.token, "reason": "x"}, headers=HX)
    assert response.status_code == 409 and "submitted" in response.content.decode()
    response = client.post(url, {"item": item.token, "reason": "x"})
    assert response.status_code == 302  # without JavaScript: back, with the message
    assert "submitted" in client.get(response["Location"]).content.decode()
    assert not Escalation.objects.exists()
    assert not RatingChange.objects.filter(field="unsafe").exists()


def test_a_consent_not_given_refuses_the_mark_as_it_refuses_a_score(setup):
    a = setup["raters"][0]
    task = setup["tasks"][0]
    consent_text_publish(study=setup["study"], text="I agree.")
    client = _signed_in(a.user)
    response = client.post(
        f"/rate/{task.token}/unsafe", {"item": _item(task).token, "reason": "x"}, headers=HX
    )
    assert response.status_code == 409 and "consent" in response.content.decode()
    assert not Escalation.objects.exists()


def test_a_practice_conversation_has_no_unsafe_mark(setup):
    a = setup["raters"][0]
    task = setup["tasks"][0]
    Assignment.objects.filter(pk=task.pk).update(kind=Assignment.Kind.PRACTICE)
    task.refresh_from_db()
    with pytest.raises(Exception, match="practice"):
        escalation_mark(assignment=task, item_token=_item(task).token, reason="x", user=a.user)
    assert not Escalation.objects.exists()


def test_withdrawing_is_refused_once_the_task_is_submitted_and_the_mark_stays_open(setup):
    a = setup["raters"][0]
    task = setup["tasks"][0]
    item = _item(task)
    client = _signed_in(a.user)
    url = f"/rate/{task.token}/unsafe"
    client.post(url, {"item": item.token, "reason": "Harmful."})
    Assignment.objects.filter(pk=task.pk).update(status=Assignment.Status.SUBMITTED)
    response = client.post(url, {"item": item.token, "action": "withdraw"}, headers=HX)
    assert response.status_code == 409
    assert Escalation.objects.get().status == Escalation.Status.OPEN
    page = client.get(f"/rate/{task.token}/").content.decode()
    assert "Marked unsafe" in page and "Withdraw the unsafe mark" not in page


# --- The queue, the decision, blinding -----------------------------------------------------------


def _disagree_and_flag(setup) -> tuple[Response, Response]:
    """Clinicians three points apart on one response of c1, and a flagged conversation: the
    queue has a dispute and a flag besides the escalation."""
    a, b = setup["raters"]
    study = setup["study"]
    attribute = study.rubric.attributes.order_by("position").first()
    c1 = {x.rater_id: x for x in Assignment.objects.filter(conversation__external_id="c1")}
    disputed = _item(c1[a.pk])
    for rater, score in ((a, 1), (b, 4)):
        task = c1[rater.pk]
        rating_save(
            assignment=task,
            item_token=task.items.get(response_id=disputed.response_id).token,
            user=rater.user,
            attribute_id=attribute.pk,
            score=score,
        )
    Rating.objects.filter(response_id=disputed.response_id).update(status="complete")
    flagged = Assignment.objects.create(
        rater=clinician_make(username="dr_flagger"),
        conversation=setup["tasks"][0].conversation,
        status=Assignment.Status.FLAGGED,
        flag_reason="Garbled.",
    )
    flagged_response = _item(setup["tasks"][1], 2).response
    AssignmentItem.objects.create(assignment=flagged, response=flagged_response, position=0)
    return disputed.response, flagged_response


def test_the_escalation_heads_the_queue_blinded_and_an_adjudicator_decides_it(setup):
    a, b = setup["raters"]
    study = setup["study"]
    disputed, flagged = _disagree_and_flag(setup)
    task_b = setup["tasks"][1]
    unsafe = _item(task_b, 3)
    _signed_in(b.user).post(
        f"/rate/{task_b.token}/unsafe", {"item": unsafe.token, "reason": "Suggests a lethal dose."}
    )
    escalation = Escalation.objects.get()
    adjudicator = _signed_in(setup["adjudicator"])
    html = adjudicator.get(f"/adjudicate/{study.pk}/").content.decode()
    # Escalated first, above the flagged and disputed rows.
    assert html.index("Escalated: unsafe") < html.index('id="adjudication-queue"')
    assert "Suggests a lethal dose." in html and "Clinician A" in html
    assert "(1 open)" in html
    page_url = f"/adjudicate/{study.pk}/{unsafe.response_id}/"
    assert f'href="{page_url}#escalation-{escalation.pk}"' in html
    page = adjudicator.get(page_url).content.decode()
    assert "Escalated: unsafe" in page and "Clinician A's reason" in page
    for text in (html, page):
        for name in _names(setup):
            assert name not in text, name
    # From another response's page, the next stop is the open escalation.
    other_page = adjudicator.get(f"/adjudicate/{study.pk}/{disputed.pk}/").content.decode()
    assert f'href="{page_url}" id="next"' in other_page

    decide = f"/adjudicate/{study.pk}/escalations/{escalation.pk}/"
    for bad, why in (
        ({"decision": "maybe", "note": "x"}, "maybe"),
        ({"decision": "not_unsafe", "note": "  "}, "say why"),
        ({"note": "x"}, "choose a decision"),
    ):
        response = adjudicator.post(decide, bad, headers=HX)
        assert response.status_code == 400 and why in response.content.decode(), bad
    escalation.refresh_from_db()
    assert escalation.is_open
    response = adjudicator.post(decide, {"decision": "confirmed_unsafe", "note": "Agreed."})
    assert response.status_code == 302
    assert response["Location"] == f"{page_url}#escalation-{escalation.pk}"
    escalation.refresh_from_db()
    assert (escalation.status, escalation.decision, escalation.decided_by) == (
        "resolved", "confirmed_unsafe", setup["adjudicator"],
    )  # fmt: skip
    html = adjudicator.get(f"/adjudicate/{study.pk}/").content.decode()
    assert "(0 open)" in html and "closed: confirmed unsafe" in html
    assert RatingChange.objects.filter(
        field="unsafe", new_value="confirmed_unsafe: Agreed.", changed_by=setup["adjudicator"]
    ).exists()
    # Decided, it can no longer be withdrawn by the clinician.
    response = _signed_in(b.user).post(
        f"/rate/{task_b.token}/unsafe", {"item": unsafe.token, "action": "withdraw"}, headers=HX
    )
    assert response.status_code == 400 and "already decided" in response.content.decode()


def test_the_clinician_letter_matches_the_response_pages(setup):
    """A clinician whose rating counts keeps their letter; one who escalated before submitting
    comes after them."""
    a, b = setup["raters"]
    study = setup["study"]
    attribute = study.rubric.attributes.order_by("position").first()
    task_a, task_b = setup["tasks"]
    item_a = _item(task_a)
    response_id = item_a.response_id
    item_b = task_b.items.get(response_id=response_id)
    for rater, task, item, score in ((b, task_b, item_b, 1), (a, task_a, item_a, 5)):
        rating_save(
            assignment=task, item_token=item.token, user=rater.user,
            attribute_id=attribute.pk, score=score,
        )  # fmt: skip
    # b rated first: b is Clinician A, a is Clinician B (ratings in order).
    Rating.objects.filter(response_id=response_id).update(status="complete")
    escalation_mark(assignment=task_a, item_token=item_a.token, reason="Risky.", user=a.user)
    html = _signed_in(setup["adjudicator"]).get(f"/adjudicate/{study.pk}/{response_id}/")
    text = html.content.decode()
    assert "Clinician B's reason" in text
    assert re.search(r"Clinician B: <strong>5</strong>", text)


def test_who_sees_the_queue_and_who_decides(setup):
    study = setup["study"]
    task = setup["tasks"][0]
    escalation_mark(
        assignment=task, item_token=_item(task).token, reason="Harmful.",
        user=setup["raters"][0].user,
    )  # fmt: skip
    escalation = Escalation.objects.get()
    queue = f"/adjudicate/{study.pk}/"
    decide = f"/adjudicate/{study.pk}/escalations/{escalation.pk}/"
    data = {"decision": "not_unsafe", "note": "Fine."}
    # The lead reads the queue (what they are told of), without the links to settle it.
    lead = _signed_in(setup["leads"][0])
    html = lead.get(queue).content.decode()
    assert "Harmful." in html and "/escalations/" not in html
    assert f"/adjudicate/{study.pk}/{escalation.response_id}/" not in html
    assert lead.post(decide, data).status_code == 403
    # An adjudicator of another study: neither the queue nor the escalation exist for them.
    elsewhere = _signed_in(setup["elsewhere"])
    assert elsewhere.get(queue).status_code == 404
    assert elsewhere.post(decide, data).status_code == 404
    # Their own study's address with this escalation's id: no such escalation there.
    assert (
        elsewhere.post(
            f"/adjudicate/{setup['other'].pk}/escalations/{escalation.pk}/", data
        ).status_code
        == 404
    )
    with pytest.raises(EscalationRefused, match="no such escalation"):
        escalation_decide(
            study=setup["other"], escalation_id=escalation.pk, decision="not_unsafe",
            note="x", user=setup["elsewhere"],
        )  # fmt: skip
    # Clinicians of the study: refused before any study is read.
    clinician = _signed_in(setup["raters"][1].user)
    assert clinician.get(queue).status_code == 403
    assert clinician.post(decide, data).status_code == 403
    assert Escalation.objects.get().is_open
    assert _signed_in(user_make(username="adm", role=ADMIN)).post(decide, data).status_code == 302


def test_the_lead_sees_the_open_count_on_the_study_pages(setup):
    study = setup["study"]
    a, b = setup["raters"]
    lead = _signed_in(setup["leads"][0])
    team = f"/manage/studies/{study.pk}/team/"
    assert "escalations-open" not in lead.get(team).content.decode()
    for rater, task in zip((a, b), setup["tasks"], strict=True):
        escalation_mark(assignment=task, item_token=_item(task).token, reason="x", user=rater.user)
    queue_link = f'href="/adjudicate/{study.pk}/#escalations"'
    for client, url in (
        (lead, team),
        (lead, f"/analysis/studies/{study.pk}/"),
        (_signed_in(user_make(username="adm", role=ADMIN)), f"/manage/?study={study.pk}"),
    ):
        html = client.get(url).content.decode()
        notice = html[html.index('id="escalations-open"') :]
        assert "2 responses marked unsafe" in notice[:400], url
        assert queue_link in notice[:600], url


# --- Telling the lead ----------------------------------------------------------------------------


def test_each_lead_gets_one_email_and_clinicians_none(setup, eager, mailoutbox, settings):
    settings.SITE_URL = "https://mentalbench.hospital.example"
    a = setup["raters"][0]
    task = setup["tasks"][0]
    lead_two = setup["leads"][1]
    MailPreference.objects.create(user=lead_two, unsubscribed_at="2026-01-01T00:00:00Z")
    third = user_make(username="lead_three", email="lead_three@x.example")
    member_add(study=setup["study"], user=third, role=LEAD)
    # A lead of another study hears nothing of this one.
    member_add(study=setup["other"], user=user_make(username="x_lead", email="xl@x.example"),
               role=LEAD)  # fmt: skip
    client = _signed_in(a.user)
    url = f"/rate/{task.token}/unsafe"
    with eager(execute=True):
        client.post(url, {"item": _item(task).token, "reason": "Encourages self-harm."})
    assert sorted(m.to[0] for m in mailoutbox) == ["lead_one@x.example", "lead_three@x.example"]
    message = mailoutbox[0]
    assert "marked unsafe" in message.subject and "Escalated study" in message.subject
    assert f"{settings.SITE_URL}/adjudicate/{setup['study'].pk}/" in message.body
    assert "1 escalation of the study is open" in message.body
    assert "Encourages self-harm." not in message.body  # the reason stays behind sign-in
    for name in _names(setup):
        assert name not in message.body, name
    assert message.extra_headers["List-Unsubscribe"].startswith("<https://")
    # A new reason is no new escalation: no new e-mail. A second clinician's is.
    with eager(execute=True):
        client.post(url, {"item": _item(task).token, "reason": "Encourages self-harm (dose)."})
    assert len(mailoutbox) == 2
    b_task = setup["tasks"][1]
    with eager(execute=True):
        _signed_in(setup["raters"][1].user).post(
            f"/rate/{b_task.token}/unsafe", {"item": _item(b_task).token, "reason": "Same."}
        )
    assert len(mailoutbox) == 4
    assert "2 escalations of the study are open" in mailoutbox[-1].body


def test_a_withdrawn_escalation_sends_no_late_email(setup, mailoutbox):
    from annotation.services.mail import escalation_mails_send

    task = setup["tasks"][0]
    item = _item(task)
    a = setup["raters"][0]
    result = escalation_mark(assignment=task, item_token=item.token, reason="x", user=a.user)
    Escalation.objects.filter(pk=result.escalation.pk).update(status="withdrawn")
    assert escalation_mails_send(escalation_id=result.escalation.pk) == 0
    assert not mailoutbox


def test_the_webhook_event_carries_ids_and_counts_only(setup):
    webhook_create(
        url="https://lab.example/", events=[Webhook.Event.ESCALATION_OPENED], study=None,
        created_by=None,
    )  # fmt: skip
    webhook_create(
        url="https://other.example/", events=[Webhook.Event.ESCALATION_OPENED],
        study=setup["other"], created_by=None,
    )  # fmt: skip
    task = setup["tasks"][0]
    item = _item(task)
    client = _signed_in(setup["raters"][0].user)
    url = f"/rate/{task.token}/unsafe"
    client.post(url, {"item": item.token, "reason": "Names a method of self-harm."})
    client.post(url, {"item": item.token, "reason": "A new reason: no new event."})
    (delivery,) = WebhookDelivery.objects.all()
    assert delivery.event == "escalation.opened"
    assert delivery.webhook.url == "https://lab.example/"
    body = json.loads(delivery.body)
    escalation = Escalation.objects.get()
    assert body["data"] == {
        "study": setup["study"].pk,
        "escalation": escalation.pk,
        "conversation": task.conversation_id,
        "response": item.response_id,
        "open_escalations": 1,
    }
    for text in _names(setup) | {"Names a method", "A new reason"}:
        assert text not in delivery.body, text
