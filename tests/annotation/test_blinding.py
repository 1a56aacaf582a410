"""Blinding is enforced: nothing a clinician receives reveals who wrote a response, and the
presentation order is uniform over responders yet stable for one assignment."""

import random
import re
from collections import Counter

import numpy as np
import pytest
from django.db import connection
from django.urls import reverse
from scipy.stats import chi2_contingency, chisquare

from annotation.models import Assignment, AssignmentItem, Rater, Response
from annotation.services import assignments_create
from annotation.services.rating import assignment_items_shuffled
from tests.factories import RESPONDERS, study_make


@pytest.fixture
def distinctive_pks(db):
    # Response pks far from every other id in the page, so finding one means it leaked.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('annotation_response', 'id'), 7340000)"
        )


def _leaks(html: str, responses) -> list[str]:
    words = []
    for response in responses:
        r = response.responder
        words += [r.key, r.name, r.family, response.metadata["model"], str(response.pk)]
    return [w for w in words if w in html]


def _card_skeletons(html: str, page_items) -> set[str]:
    """Each response card with its text, label and token blanked: must be identical markup."""
    cards = re.findall(r'<section class="card response".*?</section>', html, flags=re.S)
    assert len(cards) == len(page_items)
    skeletons = set()
    for index, (card, item) in enumerate(zip(cards, page_items, strict=True)):
        card = card.replace(item.response.text, "TEXT").replace(item.token, "TOKEN")
        card = card.replace(f"Response {item.label}", "Response X")
        card = card.replace(f'data-label="{item.label}"', 'data-label="X"')
        card = re.sub(rf"\bname=s{index}-", "name=sN-", card)
        card = re.sub(
            rf"(response|label|rationale|score|unsafe|unsafe-reason)-{index}\b", r"\1-N", card
        )
        skeletons.add(card)
    return skeletons


def test_no_clinician_facing_page_or_fragment_reveals_the_responder(
    distinctive_pks, study, clinician, client
):
    created = assignments_create(study=study, clinicians=[clinician], seed_rng=random.Random(3))
    assignment = created[0]
    client.force_login(clinician.user)
    items = list(assignment.items.select_related("response__responder").order_by("position"))
    responses = [Response.objects.get(pk=i.response_id) for i in items]
    attribute = study.rubric.attributes.first()
    save = reverse("annotation:save", args=[assignment.token])
    rate = reverse("annotation:rate", args=[assignment.token])
    unsafe = reverse("annotation:unsafe", args=[assignment.token])

    bodies = {
        "queue": client.get(reverse("annotation:queue")),
        "rate (fresh)": client.get(rate),
        "save fragment": client.post(
            save, {"item": items[0].token, "attribute": attribute.pk, "score": 4, "edited_ms": 9}
        ),
        "save fragment (stale)": client.post(
            save, {"item": items[0].token, "attribute": attribute.pk, "score": 1, "edited_ms": 1}
        ),
        "save fragment (rationale)": client.post(save, {"item": items[1].token, "rationale": "ok"}),
        "save fragment (error)": client.post(
            save, {"item": items[0].token, "attribute": 0, "score": 3}
        ),
        "unsafe fragment": client.post(
            unsafe, {"item": items[2].token, "reason": "harmful"}, headers={"HX-Request": "true"}
        ),
        "unsafe fragment (error)": client.post(
            unsafe, {"item": items[1].token, "reason": ""}, headers={"HX-Request": "true"}
        ),
        "unsafe (no JavaScript, error)": client.post(unsafe, {"item": items[1].token}),
        "adjudication feedback": client.get(reverse("annotation:adjudication_feedback")),
        "rate (resumed)": client.get(rate),
        "submit (missing scores)": client.post(
            reverse("annotation:submit", args=[assignment.token])
        ),
        "flag (no reason)": client.post(reverse("annotation:flag", args=[assignment.token])),
        "heartbeat": client.post(reverse("annotation:heartbeat", args=[assignment.token])),
        "home": client.get("/", follow=True),
    }
    for name, response in bodies.items():
        html = response.content.decode()
        assert response.status_code < 500, name
        assert _leaks(html, responses) == [], name
        assert "truncated" not in html.lower(), name
    for name in ("rate (fresh)", "rate (resumed)", "submit (missing scores)"):
        html = bodies[name].content.decode()
        # Nothing on a card may differ by responder: markup is identical once text is blanked.
        if name == "rate (fresh)":
            assert len(_card_skeletons(html, items)) == 1, name
        for item in items:
            assert f"Response {item.label}" in html


def test_the_leak_check_would_catch_a_responder_attribute(distinctive_pks, study, clinician):
    # Guard the guard: the helper sees a responder key and a pk when they are present.
    (assignment, *_) = assignments_create(study=study, clinicians=[clinician])
    response = assignment.items.first().response
    html = f'<section data-responder="{response.responder.key}" data-id="{response.pk}">'
    assert _leaks(html, [response]) == [response.responder.key, str(response.pk)]


def test_order_is_stable_across_reloads_and_follows_the_recorded_seed(study, clinician, client):
    (assignment, *_) = assignments_create(study=study, clinicians=[clinician])
    client.force_login(clinician.user)
    url = reverse("annotation:rate", args=[assignment.token])
    first = re.findall(r'"item": "([^"]+)"', client.get(url).content.decode())
    again = re.findall(r'"item": "([^"]+)"', client.get(url).content.decode())
    assert first == again and len(first) == len(RESPONDERS) * 7 + len(RESPONDERS)
    stored = list(assignment.items.order_by("position").values_list("response_id", flat=True))
    responses = list(Response.objects.filter(conversation=assignment.conversation))
    derived = [
        i.response.pk
        for i in assignment_items_shuffled(
            assignment=assignment, responses=responses, seed=assignment.seed
        )
    ]
    assert derived == stored  # the export can unblind (and check) from the seed alone


def test_each_responder_position_is_uniform_over_500_assignments(db):
    responders = [(f"r{i}", f"R{i}", f"f{i}") for i in range(10)]
    study = study_make(name="Uniformity", conversations=50, responders=responders)
    clinicians = [Rater.objects.create(kind="clinician", name=f"u{i}") for i in range(10)]
    created = assignments_create(
        study=study,
        clinicians=clinicians,
        overlap=10,
        overlap_fraction=1.0,
        seed_rng=random.Random(20260601),
    )
    assert len(created) == 500
    table = np.zeros((10, 10), dtype=int)  # responder × position
    index = {key: n for n, (key, _, _) in enumerate(responders)}
    positions = AssignmentItem.objects.filter(assignment__in=created).values_list(
        "response__responder__key", "position"
    )
    for key, position in positions:
        table[index[key], position] += 1
    assert table.sum() == 5000
    for row in table:
        assert chisquare(row).pvalue > 0.01, row
    assert chi2_contingency(table).pvalue > 0.01
    # Distinct assignments of the same conversation do not share one order.
    orders = Counter(
        tuple(a.items.order_by("position").values_list("response_id", flat=True))
        for a in Assignment.objects.filter(conversation=study.conversations.first())
    )
    assert max(orders.values()) == 1
