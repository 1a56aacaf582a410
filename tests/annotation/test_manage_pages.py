"""The admins' /manage pages: the audit trail's order and filters (page and CSV), the Reassign
menu's choices, practice given with checkboxes, time on task by responder name, the 404 page."""

import csv
import io
import re
from datetime import timedelta

import pytest
from django.db.models import Q
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotation.models import Assignment, RatingChange, Response
from annotation.services import assignments_create, rating_save
from annotation.training import practice_conversations_mark, reference_scores_set
from tests.factories import clinician_make, study_make

AUDIT = reverse("annotation:manage_audit")


def _score(assignment, *, value: int, edited_ms: int) -> None:
    """One score change by the assignment's clinician (first response, first attribute)."""
    item = assignment.items.order_by("position").first()
    attribute = assignment.conversation.study.rubric.attributes.order_by("position").first()
    rating_save(
        assignment=assignment, item_token=item.token, user=assignment.rater.user,
        attribute_id=attribute.pk, score=value, rationale=None, edited_ms=edited_ms,
    )  # fmt: skip


@pytest.fixture
def trail(db):
    """Changes by two clinicians on two conversations, on three different days."""
    study = study_make(name="Audit study", conversations=2)
    ann, ben = clinician_make(username="ann"), clinician_make(username="ben")
    created = assignments_create(study=study, clinicians=[ann, ben], overlap=2, overlap_fraction=1)
    by = {(a.rater.name, a.conversation.external_id): a for a in created}
    _score(by["ann", "c0"], value=1, edited_ms=1)
    _score(by["ann", "c1"], value=2, edited_ms=2)
    _score(by["ben", "c0"], value=3, edited_ms=3)
    # Spread over three days: ann/c0 two days ago, ann/c1 yesterday, ben/c0 today.
    now = timezone.now()
    for days, change in zip((2, 1, 0), RatingChange.objects.order_by("id"), strict=True):
        RatingChange.objects.filter(pk=change.pk).update(changed_at=now - timedelta(days=days))
    return {"study": study, "ann": ann, "ben": ben, "now": now}


def _rows(html: str) -> list[tuple[str, str, str]]:
    """(rater, conversation, new value) of each rating change row on the audit page."""
    body = html.split('id="rating-changes"', 1)[1].split("</table>", 1)[0]
    cells = [re.findall(r"<td>([^<]*)</td>", row) for row in re.findall(r"<tr><td>.*?</tr>", body)]
    return [(c[2], c[3], c[7]) for c in cells]


def test_the_audit_trail_is_newest_first(admin_member_client, trail):
    page = admin_member_client.get(AUDIT).content.decode()
    assert _rows(page) == [("ben", "c0", "3"), ("ann", "c1", "2"), ("ann", "c0", "1")]
    # The CSV stays a log read forward: oldest first.
    export = admin_member_client.get(AUDIT, {"format": "csv"}).content.decode()
    assert [r["new_value"] for r in csv.DictReader(io.StringIO(export))] == ["1", "2", "3"]


def test_filters_narrow_the_page_and_the_csv_alike(admin_member_client, trail):
    ann = trail["ann"]
    page = admin_member_client.get(AUDIT, {"clinician": ann.pk}).content.decode()
    assert _rows(page) == [("ann", "c1", "2"), ("ann", "c0", "1")]
    page = admin_member_client.get(AUDIT, {"conversation": " c0 "}).content.decode()
    assert _rows(page) == [("ben", "c0", "3"), ("ann", "c0", "1")]
    yesterday = (timezone.localdate(trail["now"]) - timedelta(days=1)).isoformat()
    filters = {"study": trail["study"].pk, "date_from": yesterday, "date_to": yesterday}
    page = admin_member_client.get(AUDIT, filters).content.decode()
    assert _rows(page) == [("ann", "c1", "2")]
    # The download link carries the filters, and the CSV holds just those changes.
    link = re.search(r'href="\?format=csv&amp;([^"]+)" id="audit-csv"', page).group(1)
    assert f"date_from={yesterday}" in link and f"study={trail['study'].pk}" in link
    assert "the 1 changes shown" in page
    export = admin_member_client.get(f"{AUDIT}?format=csv&{link.replace('&amp;', '&')}")
    rows = list(csv.DictReader(io.StringIO(export.content.decode())))
    assert [(r["rater"], r["conversation"], r["new_value"]) for r in rows] == [("ann", "c1", "2")]
    # Nothing matches: said so.
    empty = admin_member_client.get(AUDIT, {"clinician": ann.pk, "conversation": "nope"})
    assert "No change matches these filters." in empty.content.decode()


def test_a_wrong_filter_is_refused_with_the_reason(admin_member_client, trail):
    bad = {"date_from": "2024-05-02", "date_to": "2024-05-01"}
    page = admin_member_client.get(AUDIT, bad)
    html = page.content.decode()
    assert page.status_code == 400 and "The last day comes before the first." in html
    assert 'id="rating-changes"' not in html  # no rows under wrong filters
    export = admin_member_client.get(AUDIT, {"format": "csv", **bad})
    assert export.status_code == 400 and b"date_to: The last day comes before" in export.content
    assert admin_member_client.get(AUDIT, {"date_from": "yesterday"}).status_code == 400
    assert admin_member_client.get(AUDIT, {"clinician": 999999}).status_code == 400


def test_the_pager_keeps_the_filters(admin_member_client, trail):
    assignment = Assignment.objects.get(rater=trail["ann"], conversation__external_id="c0")
    for k in range(55):
        _score(assignment, value=k % 5 + 1, edited_ms=100 + k)
    page = admin_member_client.get(AUDIT, {"clinician": trail["ann"].pk}).content.decode()
    assert "Page 1 of 2" in page
    assert f'href="?clinician={trail["ann"].pk}&amp;page=2" rel="next"' in page


def _move_menu(html: str, assignment) -> list[str] | None:
    """The clinicians offered in the row's Reassign/Reclaim menu, in order (None: no menu)."""
    form = re.search(
        rf'action="/manage/assignments/{assignment.pk}/(?:reassign|reclaim)"[^>]*>(.*?)</form>',
        html,
        re.S,
    )
    return re.findall(r'<option value="\d+">([^<]+)</option>', form.group(1)) if form else None


def test_reassign_offers_only_clinicians_who_can_take_it_least_loaded_first(
    admin_member_client, db
):
    study = study_make(name="Move study", conversations=2)
    ann, ben = clinician_make(username="ann"), clinician_make(username="ben")
    cleo, dan = clinician_make(username="cleo"), clinician_make(username="dan")
    # ann and ben both hold c0 and c1; dan holds another study's conversation (one open task).
    assignments_create(study=study, clinicians=[ann, ben], overlap=2, overlap_fraction=1)
    assignments_create(study=study_make(name="Other", conversations=1), clinicians=[dan])
    html = admin_member_client.get(reverse("annotation:manage"), {"study": study.pk}).content
    html = html.decode()
    row = Assignment.objects.get(rater=ann, conversation__external_id="c0")
    # Not ann (holds it) nor ben (holds it too); cleo (no work) before dan (one open task).
    assert _move_menu(html, row) == ["cleo", "dan"]
    # The default (the first option) really is accepted by the service.
    moved = admin_member_client.post(
        reverse("annotation:manage_reassign", args=[row.pk]), {"rater": cleo.pk}
    )
    assert moved.status_code == 302
    assert Assignment.objects.get(pk=row.pk).rater == cleo


def test_reassign_says_so_when_nobody_can_take_it(admin_member_client, db):
    study = study_make(name="Full study", conversations=1)
    ann, ben = clinician_make(username="ann"), clinician_make(username="ben")
    (first, _second) = assignments_create(
        study=study, clinicians=[ann, ben], overlap=2, overlap_fraction=1
    )
    html = admin_member_client.get(reverse("annotation:manage"), {"study": study.pk}).content
    html = html.decode()
    assert _move_menu(html, first) is None
    # Said once above the table, not in every row; each row says it cannot move.
    assert html.count("cannot move: every other clinician already holds") == 1
    assert html.count('<span class="sr-only"> cannot move</span>') == 2


def test_practice_is_given_with_checkboxes(admin_member_client, db):
    study = study_make(name="Practice study", conversations=2)
    ann = clinician_make(username="ann")
    practice_conversations_mark(study=study, external_ids=["c0"])
    attributes = list(study.rubric.attributes.values_list("name", flat=True))
    keys = Response.objects.filter(conversation__external_id="c0").values_list(
        "responder__key", flat=True
    )
    cells = [(k, a) for k in keys for a in attributes]
    rows = [(n, "c0", k, a, "3") for n, (k, a) in enumerate(cells)]
    reference_scores_set(study=study, rows=rows, user=None)
    url = reverse("annotation:manage_training")
    page = admin_member_client.get(url, {"study": study.pk}).content.decode()
    assert f'type="checkbox" name="clinicians" value="{ann.pk}"' in page
    assert '<select name="clinicians"' not in page
    given = admin_member_client.post(
        url, {"study": study.pk, "action": "assign", "clinicians": [ann.pk]}
    )
    assert given.status_code == 302
    assert Assignment.objects.filter(rater=ann, kind=Assignment.Kind.PRACTICE).count() == 1


def test_time_on_task_names_the_responders_for_admins(admin_member_client, db):
    study = study_make(name="Time study", conversations=1)
    ann = clinician_make(username="ann")
    (assignment,) = assignments_create(study=study, clinicians=[ann])
    attribute = study.rubric.attributes.order_by("position").first()
    for n, item in enumerate(assignment.items.order_by("position")):
        rating_save(
            assignment=assignment, item_token=item.token, user=ann.user,
            attribute_id=attribute.pk, score=3, rationale=None, edited_ms=n + 1,
        )  # fmt: skip
    start = timezone.now()
    for n, change in enumerate(RatingChange.objects.order_by("id")):
        moved = start + timedelta(seconds=5 * n)
        RatingChange.objects.filter(pk=change.pk).update(changed_at=moved)
    Assignment.objects.filter(pk=assignment.pk).update(active_seconds=120)
    page = admin_member_client.get(
        reverse("annotation:manage_time_on_task"), {"study": study.pk}
    ).content.decode()
    cell = re.search(r"<td>120 s</td>\s*<td>(.*?)</td>", page, re.S).group(1)
    # Every responder by name (the admin is not blinded), none by a clinician's letter.
    for name in ("Leaky GPT-4o", "Leaky Claude", "Leaky Llama", "Leaky Human Reference"):
        assert f"{name}: " in cell
    assert not re.search(r"(^|· )[A-J]: ", cell)
    from annotation.time_on_task import response_active_seconds

    assert sum(response_active_seconds(assignments=Q(pk=assignment.pk)).values()) == 120


def test_an_unknown_address_gets_the_styled_404_page(alice):
    anonymous = Client().get("/no-such-page/")
    html = anonymous.content.decode()
    assert anonymous.status_code == 404
    assert "There is no page at this address" in html and 'class="topbar"' in html
    assert "/no-such-page/" in html and "sign in" in html
    signed_in = alice.get("/rate/not-a-token/")
    html = signed_in.content.decode()
    assert signed_in.status_code == 404 and "There is no page at this address" in html
    assert "Log out" in html and "alice" in html
    # The API keeps its JSON error.
    assert Client().get("/api/nothing-here/").json()["detail"].startswith("no API endpoint")
