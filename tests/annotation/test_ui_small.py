"""Small pieces of the UI: the favicon, the 403 page, the paginated audit trail, the API's
documentation page, and the per-study rationale rule."""

import pytest
from django.urls import reverse
from django.utils.html import escape

from annotation.models import Assignment, RatingChange, Study
from annotation.services import AssignmentIncomplete, assignment_submit, rating_save

pytestmark = pytest.mark.portable


def test_favicon_is_served(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"].endswith("favicon.ico")
    assert "/static/" in response["Location"]


def test_forbidden_page_keeps_the_navigation(alice):
    response = alice.get(reverse("annotation:manage"))
    assert response.status_code == 403
    html = response.content.decode()
    assert "You do not have access to this page" in html
    assert 'class="topbar"' in html and "Log out" in html and 'href="/rate/"' in html


def _rationale_changes(assignment, user, n: int) -> None:
    item = assignment.items.order_by("position").first()
    for k in range(n):
        rating_save(
            assignment=assignment, item_token=item.token, user=user, attribute_id=None,
            score=None, rationale=f"draft {k}", edited_ms=k + 1,
        )  # fmt: skip


def test_audit_trail_is_paginated(client, admin_member, assignment, clinician):
    _rationale_changes(assignment, clinician.user, 55)
    assert RatingChange.objects.count() >= 55
    client.force_login(admin_member)
    first = client.get(reverse("annotation:manage_audit")).content.decode()
    assert "Page 1 of 2" in first and first.count("<tr><td>") == 50
    second = client.get(reverse("annotation:manage_audit") + "?page=2").content.decode()
    assert "Page 2 of 2" in second and second.count("<tr><td>") == RatingChange.objects.count() - 50
    # Out-of-range or junk page numbers show a real page, not an error.
    assert client.get(reverse("annotation:manage_audit") + "?page=x").status_code == 200


def test_api_documentation_page_uses_local_assets_only(client):
    response = client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "swagger-ui" in html and "/static/drf_spectacular_sidecar/" in html
    assert "cdn" not in html.lower() and "<script>" not in html  # no inline script


def test_required_rationale_is_checked_on_submit_per_response(assignment, clinician):
    Study.objects.filter(pk=assignment.conversation.study_id).update(
        rationale_required=True, rationale_min_length=12
    )
    assignment.refresh_from_db()
    attributes = list(assignment.conversation.study.rubric.attributes.values_list("pk", flat=True))
    items = list(assignment.items.order_by("position"))
    for n, item in enumerate(items):
        for attribute in attributes:
            rating_save(
                assignment=assignment, item_token=item.token, user=clinician.user,
                attribute_id=attribute, score=3, rationale=None, edited_ms=1,
            )  # fmt: skip
        # The first response gets a long enough rationale, the second a short one, the rest none.
        text = {0: "  Warm, specific, safe.  ", 1: "Too short  "}.get(n)
        if text is not None:
            rating_save(
                assignment=assignment, item_token=item.token, user=clinician.user,
                attribute_id=None, score=None, rationale=text, edited_ms=2,
            )  # fmt: skip
    with pytest.raises(AssignmentIncomplete) as caught:
        assignment_submit(assignment=assignment, user=clinician.user)
    missing = dict(caught.value.missing)
    assert items[0].label not in missing
    assert missing[items[1].label] == ["rationale (at least 12 characters)"]
    assert all(missing[i.label] == ["rationale (at least 12 characters)"] for i in items[2:])
    assert "Response B: rationale (at least 12 characters) missing" in str(caught.value)
    assignment.refresh_from_db()
    assert assignment.status != Assignment.Status.SUBMITTED
    # Optional (the default): the same conversation submits.
    Study.objects.filter(pk=assignment.conversation.study_id).update(rationale_required=False)
    assignment.conversation.study.refresh_from_db()
    assignment_submit(assignment=assignment, user=clinician.user)


def test_guidelines_page_shows_each_assigned_study_rubric(alice, assignment):
    response = alice.get(reverse("annotation:guidelines"))
    assert response.status_code == 200
    html = response.content.decode()
    study = assignment.conversation.study
    assert study.name in html
    for attribute in study.rubric.attributes.prefetch_related("levels"):
        assert escape(attribute.name) in html and escape(attribute.description) in html
        for level in attribute.levels.all():
            assert escape(level.anchor) in html
    assert "optional, one sentence" in html
    # Blinding: nothing about who wrote a response.
    assert "Leaky" not in html and "leakyfamily" not in html
