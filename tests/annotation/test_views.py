"""Rating pages over HTTP: roles and user-scoped fetches, autosave, resume, submit, flag, admin."""

import csv
import io
import re

import pytest
from django.urls import reverse

from annotation.models import Assignment, Rating, RatingChange
from annotation.services import assignments_create
from tests.factories import clinician_make

# Filters, exports and saves must work on every supported database: bin/test runs these on
# SQLite as well.
pytestmark = pytest.mark.portable


def _save(client, assignment, **data):
    return client.post(reverse("annotation:save", args=[assignment.token]), data)


def _attribute_ids(assignment):
    return list(assignment.conversation.study.rubric.attributes.values_list("pk", flat=True))


@pytest.fixture
def bobs_assignment(study, other_clinician):
    return assignments_create(study=study, clinicians=[other_clinician])[0]


# --- permissions: each in its own test ---------------------------------------------------------


def test_clinician_cannot_open_other_assignment(alice, bobs_assignment):
    assert alice.get(reverse("annotation:rate", args=[bobs_assignment.token])).status_code == 404


def test_clinician_cannot_save_submit_flag_or_heartbeat_on_other_assignment(alice, bobs_assignment):
    item = bobs_assignment.items.first()
    token = bobs_assignment.token
    data = {"item": item.token, "attribute": _attribute_ids(bobs_assignment)[0], "score": 3}
    assert alice.post(reverse("annotation:save", args=[token]), data).status_code == 404
    assert alice.post(reverse("annotation:submit", args=[token])).status_code == 404
    assert alice.post(reverse("annotation:flag", args=[token]), {"reason": "x"}).status_code == 404
    assert alice.post(reverse("annotation:heartbeat", args=[token])).status_code == 404
    assert not Rating.objects.filter(rater=bobs_assignment.rater).exists()
    assert Assignment.objects.get(pk=bobs_assignment.pk).status == "pending"


def test_clinician_cannot_reach_admin_pages(alice, bobs_assignment):
    assert alice.get(reverse("annotation:manage")).status_code == 403
    assert alice.post(reverse("annotation:manage_invite"), {"username": "x"}).status_code == 403
    url = reverse("annotation:manage_reassign", args=[bobs_assignment.pk])
    assert alice.post(url, {"rater": 1}).status_code == 403
    assert alice.get(reverse("admin:index")).status_code == 302  # to the admin's login


def test_clinician_cannot_reach_analysis(alice):
    assert alice.get("/analysis/").status_code in (403, 404)


def test_clinician_cannot_export_the_audit_trail(alice):
    assert alice.get(reverse("annotation:manage_audit") + "?format=csv").status_code == 403


def test_researcher_cannot_rate(client, researcher, bobs_assignment):
    client.force_login(researcher)
    assert client.get(reverse("annotation:queue")).status_code == 403


def test_anonymous_users_are_sent_to_login(client, assignment):
    response = client.get(reverse("annotation:rate", args=[assignment.token]))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_home_routes_each_role(client, clinician, researcher, admin_member):
    client.force_login(clinician.user)
    assert client.get("/")["Location"] == reverse("annotation:queue")
    client.force_login(researcher)
    assert client.get("/")["Location"] == "/analysis/"
    client.force_login(admin_member)
    assert client.get("/")["Location"] == reverse("annotation:manage")


# --- rating flow --------------------------------------------------------------------------------


def test_autosave_round_trip_and_resume_after_reload(alice, assignment):
    items = list(assignment.items.order_by("position"))
    attribute = _attribute_ids(assignment)[2]
    response = _save(
        alice, assignment, item=items[1].token, attribute=attribute, score=2, edited_ms=10
    )
    assert response.status_code == 200 and b"All changes saved" in response.content
    _save(alice, assignment, item=items[1].token, rationale="Warm but vague.", edited_ms=11)

    page = alice.get(reverse("annotation:rate", args=[assignment.token])).content.decode()
    checked = re.findall(r"name=s(\d+)-(\d+) value=(\d) checked", page)
    assert checked == [("1", str(attribute), "2")]
    assert "Warm but vague.</textarea>" in page


def test_stale_save_is_reported_to_the_user(alice, assignment):
    item = assignment.items.first()
    attribute = _attribute_ids(assignment)[0]
    _save(alice, assignment, item=item.token, attribute=attribute, score=5, edited_ms=2000)
    response = _save(
        alice, assignment, item=item.token, attribute=attribute, score=1, edited_ms=1000
    )
    assert b"Another tab saved a newer value" in response.content


def test_bad_saves_answer_400_with_a_message(alice, assignment):
    item = assignment.items.first()
    response = _save(
        alice, assignment, item=item.token, attribute=_attribute_ids(assignment)[0], score=9
    )
    assert response.status_code == 400 and b"not 9" in response.content
    assert _save(alice, assignment, item="nope", rationale="x").status_code == 400


def test_submit_validation_lists_what_is_missing_inline(alice, assignment):
    item = assignment.items.order_by("position").first()
    _save(alice, assignment, item=item.token, attribute=_attribute_ids(assignment)[0], score=3)
    response = alice.post(reverse("annotation:submit", args=[assignment.token]))
    assert response.status_code == 422
    html = response.content.decode()
    assert "Not submitted: some scores are missing" in html
    assert "Response A</a>: Informativeness, Relevance, Safety" in html
    assert "Response D</a>: Guidance, Informativeness" in html
    assert Assignment.objects.get(pk=assignment.pk).status == "in_progress"


def test_submit_locks_and_opens_the_next_conversation_and_progress_advances(alice, assignment):
    for item in assignment.items.all():
        for attribute in _attribute_ids(assignment):
            _save(alice, assignment, item=item.token, attribute=attribute, score=4)
    queue = alice.get(reverse("annotation:queue")).content.decode()
    assert "0 / 3 conversations</span> done" in queue
    response = alice.post(reverse("annotation:submit", args=[assignment.token]))
    following = Assignment.objects.filter(rater=assignment.rater, status="pending").first()
    assert response["Location"] == reverse("annotation:rate", args=[following.token])
    assert "1 / 3 conversations</span> done" in alice.get(response["Location"]).content.decode()
    locked = alice.get(reverse("annotation:rate", args=[assignment.token])).content.decode()
    assert "can no longer be edited" in locked and "hx-post" not in locked
    item = assignment.items.first()
    assert _save(alice, assignment, item=item.token, rationale="late").status_code == 409
    assert set(Rating.objects.filter(assignment=assignment).values_list("status", flat=True)) == {
        "complete"
    }


def test_flagging_a_conversation_needs_a_reason(alice, assignment):
    url = reverse("annotation:flag", args=[assignment.token])
    assert alice.post(url, {"reason": ""}).status_code == 422
    response = alice.post(url, {"reason": "Broken responses"})
    assert response.status_code == 302
    assignment.refresh_from_db()
    assert (assignment.status, assignment.flag_reason) == ("flagged", "Broken responses")


def test_heartbeat_records_activity(alice, assignment):
    url = reverse("annotation:heartbeat", args=[assignment.token])
    assert alice.post(url).status_code == 204
    assignment.refresh_from_db()
    assert assignment.last_activity_at is not None


def test_rating_page_runs_a_fixed_number_of_queries(
    alice, assignment, django_assert_max_num_queries
):
    with django_assert_max_num_queries(15):
        alice.get(reverse("annotation:rate", args=[assignment.token]))


# --- admin pages ----------------------------------------------------------------------------------


def test_admin_assigns_with_overlap_and_sees_progress(
    client, admin_member, study, django_user_model
):
    a, b = clinician_make(username="a1"), clinician_make(username="b1")
    client.force_login(admin_member)
    response = client.post(
        reverse("annotation:manage_assign"),
        {"study": study.pk, "clinicians": [a.pk, b.pk], "overlap": 2, "overlap_percent": 100},
    )
    assert response.status_code == 302
    assert Assignment.objects.filter(rater=a).count() == Assignment.objects.filter(rater=b).count()
    page = client.get(response["Location"]).content.decode()
    assert "Progress per clinician" in page and "a1" in page and "b1" in page


def test_admin_invites_a_clinician_who_sets_a_password_with_the_link(
    client, admin_member, django_user_model
):
    client.force_login(admin_member)
    invite = client.post(reverse("annotation:manage_invite"), {"username": "dora"}, follow=True)
    page = invite.content.decode()
    link = re.search(r'id="password-link">http://testserver([^<]+)<', page).group(1)
    client.logout()
    form = client.get(link, follow=True)
    assert b"Set your password" in form.content
    done = client.post(
        form.redirect_chain[-1][0] if form.redirect_chain else link,
        {"new_password1": "a-Long-pass-9871", "new_password2": "a-Long-pass-9871"},
    )
    assert done.status_code == 302
    # Through the sign-in page, as dora would (the lock-out backend needs the request).
    signed_in = client.post(
        reverse("account_login"), {"login": "dora", "password": "a-Long-pass-9871"}
    )
    assert signed_in.status_code == 302 and client.session["_auth_user_id"] == str(
        django_user_model.objects.get(username="dora").pk
    )


def test_admin_sees_and_exports_the_audit_trail(client, admin_member, assignment, clinician):
    item = assignment.items.first()
    client.force_login(clinician.user)
    attribute = _attribute_ids(assignment)[0]
    _save(client, assignment, item=item.token, attribute=attribute, score=2)
    _save(client, assignment, item=item.token, attribute=attribute, score=5)
    client.force_login(admin_member)
    assert b"Audit trail" in client.get(reverse("annotation:manage_audit")).content
    study = assignment.conversation.study
    export = client.get(reverse("annotation:manage_audit") + f"?format=csv&study={study.pk}")
    rows = list(csv.DictReader(io.StringIO(export.content.decode())))
    assert [(r["field"], r["old_value"], r["new_value"], r["changed_by"]) for r in rows] == [
        ("score", "", "2", "alice"),
        ("score", "2", "5", "alice"),
    ]
    assert rows[0]["responder"] == item.response.responder.key
    assert RatingChange.objects.filter(rating__rater=clinician).count() == 2


def test_admin_reassigns_unstarted_work_and_reclaims_only_stale_work(
    client, admin_member, assignment, clinician, other_clinician
):
    client.force_login(admin_member)
    url = reverse("annotation:manage_reassign", args=[assignment.pk])
    assert client.post(url, {"rater": other_clinician.pk}).status_code == 302
    assert Assignment.objects.get(pk=assignment.pk).rater == other_clinician

    started = Assignment.objects.filter(rater=clinician).first()
    client.force_login(clinician.user)
    _save(client, started, item=started.items.first().token, rationale="begun")
    client.force_login(admin_member)
    client.post(
        reverse("annotation:manage_reassign", args=[started.pk]), {"rater": other_clinician.pk}
    )
    client.post(
        reverse("annotation:manage_reclaim", args=[started.pk]), {"rater": other_clinician.pk}
    )
    started.refresh_from_db()
    assert (started.rater, started.status) == (clinician, "in_progress")  # never moved silently
    page = client.get(reverse("annotation:manage")).content.decode()
    assert "this assignment was started" in page or "untouched" in page


def test_admin_issues_a_password_reset_link(client, admin_member, clinician):
    client.force_login(admin_member)
    url = reverse("annotation:manage_reset_link", args=[clinician.user.pk])
    page = client.post(url, follow=True).content.decode()
    assert re.search(r'id="password-link">http://testserver/accounts/set-password/', page)
    # Shown once: the page shows no link when opened again.
    assert 'id="password-link"' not in client.get(reverse("annotation:manage")).content.decode()


def test_the_queue_continues_started_work_first(alice, assignment, clinician):
    assignments = list(Assignment.objects.filter(rater=clinician).order_by("created_at", "token"))
    last = assignments[-1]
    _save(alice, last, item=last.items.first().token, rationale="started here")
    page = alice.get(reverse("annotation:queue")).content.decode()
    assert f'href="{reverse("annotation:rate", args=[last.token])}" id="continue"' in page
    assert "Continue where you stopped" in page


def test_admin_overview_runs_a_fixed_number_of_queries(
    client, admin_member, assignment, other_clinician, django_assert_max_num_queries
):
    client.force_login(admin_member)
    study = assignment.conversation.study
    with django_assert_max_num_queries(30):
        page = client.get(reverse("annotation:manage"), {"study": study.pk})
    assert page.status_code == 200 and page.content.decode().count("Reassign") == 3
