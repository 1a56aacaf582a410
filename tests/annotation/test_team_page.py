"""A study's team: progress per site and per clinician (team_selectors.team_progress), and the
team page (/manage/studies/<id>/team/) its leads and the platform admins use to add and remove
members, where a lead cannot leave the study without a lead."""

from __future__ import annotations

import datetime

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from annotation.membership import (
    CLINICIAN,
    LEAD,
    MEMBER_RESEARCHER,
    member_add,
    member_remove_checked,
)
from annotation.models import Assignment, Rater, StudyMember
from annotation.team_selectors import (
    DONE,
    IN_PROGRESS,
    NO_SITE,
    NOT_STARTED,
    NOTHING_ASSIGNED,
    OVERDUE,
    team_progress,
)
from tests.factories import clinician_make, study_make, user_make

S = Assignment.Status


def _team_url(study) -> str:
    return reverse("annotation:manage_team", args=[study.pk])


def _remove_url(member) -> str:
    return reverse("annotation:manage_team_remove", args=[member.study_id, member.pk])


def _give(rater, conversations, *statuses, kind=Assignment.Kind.RATING, **fields):
    for conversation, status in zip(conversations, statuses, strict=False):
        Assignment.objects.create(
            rater=rater, conversation=conversation, status=status, kind=kind, **fields
        )


@pytest.fixture
def two_sites(db):
    """Two sites and no-site: ann done, ben overdue (past the deadline, started), cat not
    started, dan a member with nothing yet, eve given work without being a member."""
    study = study_make(name="Two sites", conversations=4)
    study.deadline = timezone.localdate() - datetime.timedelta(days=1)
    study.save(update_fields=["deadline"])
    c = list(study.conversations.order_by("external_id"))
    ann, ben, cat, dan, eve = (
        clinician_make(username=n) for n in ("ann", "ben", "cat", "dan", "eve")
    )
    member_add(study=study, user=ann.user, role=CLINICIAN, site="St Mary's")
    member_add(study=study, user=ben.user, role=CLINICIAN, site="St Mary's")
    member_add(study=study, user=cat.user, role=CLINICIAN, site="Royal")
    member_add(study=study, user=dan.user, role=CLINICIAN)
    _give(ann, c, S.SUBMITTED, S.SUBMITTED)
    # Practice and a reclaimed assignment are not real work: ann stays done.
    _give(ann, c[2:], S.PENDING, kind=Assignment.Kind.PRACTICE)
    _give(ann, c[3:], S.RECLAIMED)
    recent = timezone.now() - datetime.timedelta(hours=2)
    _give(ben, c, S.SUBMITTED, S.IN_PROGRESS, S.PENDING, last_activity_at=recent)
    _give(cat, c[1:], S.PENDING, S.PENDING)
    _give(eve, c[3:], S.IN_PROGRESS, last_activity_at=recent)
    return study


def test_progress_per_clinician_and_per_site(two_sites):
    with CaptureQueriesContext(connection) as queries:
        team = team_progress(study=two_sites)
    assert len(queries) == 2  # whatever the number of clinicians
    assert team.past_deadline and team.deadline == two_sites.deadline
    rows = {r.name: r for r in team.clinicians}
    assert [r.name for r in team.clinicians] == ["cat", "ann", "ben", "dan", "eve"]
    assert {n: r.status for n, r in rows.items()} == {
        "ann": DONE,
        "ben": OVERDUE,
        "cat": NOT_STARTED,
        "dan": NOTHING_ASSIGNED,
        "eve": OVERDUE,
    }
    ann, ben, cat = rows["ann"], rows["ben"], rows["cat"]
    assert (ann.site, ann.assigned, ann.submitted, ann.in_progress) == ("St Mary's", 2, 2, 0)
    assert (ben.assigned, ben.submitted, ben.in_progress, ben.open) == (3, 1, 1, 2)
    assert ben.last_activity is not None and ann.last_activity is None
    # Never started, and past the deadline: both are said.
    assert cat.overdue and cat.site == "Royal"
    assert rows["eve"].site == rows["dan"].site == NO_SITE

    sites = {s.site: s for s in team.sites}
    assert [s.site for s in team.sites] == ["Royal", "St Mary's", NO_SITE]
    mary, royal, none = sites["St Mary's"], sites["Royal"], sites[NO_SITE]
    assert (mary.clinicians, mary.assigned, mary.submitted, mary.percent_done) == (2, 5, 3, 60)
    assert (mary.not_started, mary.overdue) == (0, 1)
    assert (royal.clinicians, royal.assigned, royal.percent_done) == (1, 2, 0)
    assert (royal.not_started, royal.overdue) == (1, 1)
    assert (none.clinicians, none.assigned, none.overdue) == (2, 1, 1)
    total = team.total
    assert (total.clinicians, total.assigned, total.submitted, total.overdue) == (5, 8, 3, 3)


def test_before_the_deadline_nobody_is_overdue(two_sites):
    two_sites.deadline = timezone.localdate()  # due today: not passed yet
    two_sites.save(update_fields=["deadline"])
    team = team_progress(study=two_sites)
    assert not team.past_deadline
    statuses = {r.name: r.status for r in team.clinicians}
    assert statuses["ben"] == IN_PROGRESS and statuses["cat"] == NOT_STARTED
    assert not any(r.overdue for r in team.clinicians) and team.total.overdue == 0


def test_without_a_deadline_stale_work_is_overdue(two_sites):
    two_sites.deadline = None
    two_sites.stale_after_days = 7
    two_sites.save(update_fields=["deadline", "stale_after_days"])
    # cat's work was given long ago and never touched; ben and eve worked two hours ago.
    Assignment.objects.filter(rater__name="cat").update(
        created_at=timezone.now() - datetime.timedelta(days=8)
    )
    rows = {r.name: r for r in team_progress(study=two_sites).clinicians}
    assert rows["cat"].overdue and rows["cat"].status == NOT_STARTED
    assert not rows["ben"].overdue and rows["ben"].status == IN_PROGRESS
    # Eight days later ben's untouched open work is stale too.
    later = timezone.now() + datetime.timedelta(days=8)
    assert {r.name: r.status for r in team_progress(study=two_sites, now=later).clinicians}[
        "ben"
    ] == OVERDUE


def test_the_study_page_shows_progress_per_site(admin_member_client, two_sites):
    html = admin_member_client.get(reverse("annotation:manage"), {"study": two_sites.pk})
    html = html.content.decode()
    progress = html[html.index('id="progress"') : html.index('id="topup"')]
    assert 'id="site-progress"' in progress and "St Mary&#x27;s" in progress
    assert "Deadline: <strong>" in progress and "passed" in progress
    assert 'id="clinician-progress"' in progress and "<strong>overdue</strong>" in progress
    assert f'href="{_team_url(two_sites)}"' in html


# --- The team page -----------------------------------------------------------------------------


@pytest.fixture
def lead(two_sites):
    user = user_make(username="lena")
    member_add(study=two_sites, user=user, role=LEAD, site="Royal")
    return user


def test_who_opens_the_team_page(client, admin_member_client, two_sites, lead, researcher):
    url = _team_url(two_sites)
    assert admin_member_client.get(url).status_code == 200
    client.logout()  # the same client as admin_member_client
    anonymous = client.get(url)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")

    client.force_login(lead)
    page = client.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="site-progress"' in html and "lena" in html and "(you)" in html
    # A lead cannot open the platform admins' study page, so the team page does not link it.
    assert f'href="{reverse("annotation:manage")}?study=' not in html

    other_study = study_make(name="Elsewhere", conversations=1)
    elsewhere = user_make(username="olga")
    member_add(study=other_study, user=elsewhere, role=LEAD)
    reader = user_make(username="rita")
    member_add(study=two_sites, user=reader, role=MEMBER_RESEARCHER)
    ann = Rater.objects.get(name="ann").user
    # Another study's lead, the study's own researcher and clinician, and a platform-wide
    # researcher (who reads every study's results) manage nothing here.
    for user in (elsewhere, reader, ann, researcher):
        client.force_login(user)
        assert client.get(url).status_code == 404, user
        assert client.post(url, {"username": "rita", "role": LEAD}).status_code == 404, user
    assert not StudyMember.objects.filter(user=reader, role=LEAD).exists()
    # The lead of the other study sees its team, not this one's.
    client.force_login(elsewhere)
    assert client.get(_team_url(other_study)).status_code == 200


def test_a_lead_adds_a_member_with_a_site(client, two_sites, lead):
    client.force_login(lead)
    newcomer = user_make(username="nina")
    response = client.post(
        _team_url(two_sites), {"username": "nina", "role": CLINICIAN, "site": " Royal "}
    )
    assert response.status_code == 302 and response["Location"].endswith("#members")
    member = StudyMember.objects.get(study=two_sites, user=newcomer)
    assert (member.role, member.site) == (CLINICIAN, "Royal")
    assert "nina added as clinician (site: Royal)." in [
        str(m) for m in get_messages(response.wsgi_request)
    ]
    # Again with another site: the site changes, nothing is doubled.
    client.post(_team_url(two_sites), {"username": "Nina", "role": CLINICIAN, "site": "Leeds"})
    assert StudyMember.objects.get(study=two_sites, user=newcomer).site == "Leeds"
    # The new member shows in the progress tables (nothing assigned yet).
    team = team_progress(study=two_sites)
    assert {r.name: r.status for r in team.clinicians}["nina"] == NOTHING_ASSIGNED


def test_adding_says_why_it_cannot(client, two_sites, lead):
    client.force_login(lead)
    response = client.post(_team_url(two_sites), {"username": "nobody", "role": CLINICIAN})
    assert response.status_code == 422
    assert "No account is named &#x27;nobody&#x27;" in response.content.decode()
    user_make(username="gone", is_active=False)
    response = client.post(_team_url(two_sites), {"username": "gone", "role": CLINICIAN})
    assert response.status_code == 422 and "is deactivated" in response.content.decode()
    response = client.post(_team_url(two_sites), {"username": "ann", "role": "owner"})
    assert response.status_code == 422 and "Select a valid choice" in response.content.decode()
    assert not StudyMember.objects.filter(study=two_sites, user__username="gone").exists()


def test_a_lead_removes_a_member(client, two_sites, lead):
    client.force_login(lead)
    member = StudyMember.objects.get(study=two_sites, user__username="dan")
    response = client.post(_remove_url(member))
    assert response.status_code == 302 and response["Location"].endswith("#members")
    assert not StudyMember.objects.filter(pk=member.pk).exists()
    # GET does not remove; another study's member is not found through this study.
    cat = StudyMember.objects.get(study=two_sites, user__username="cat")
    assert client.get(_remove_url(cat)).status_code == 405
    other_study = study_make(name="Elsewhere", conversations=1)
    stranger = member_add(study=other_study, user=cat.user, role=CLINICIAN)
    url = reverse("annotation:manage_team_remove", args=[two_sites.pk, stranger.pk])
    assert client.post(url).status_code == 404
    assert StudyMember.objects.filter(pk=stranger.pk).exists()


def test_the_last_lead_cannot_remove_themselves(client, two_sites, lead):
    client.force_login(lead)
    own = StudyMember.objects.get(study=two_sites, user=lead, role=LEAD)
    response = client.post(_remove_url(own), follow=True)
    assert StudyMember.objects.filter(pk=own.pk).exists()
    assert "You are this study&#x27;s only lead" in response.content.decode()
    with pytest.raises(ValueError, match="only lead"):
        member_remove_checked(member=own, actor=lead)
    # With a second lead they may leave, and the page is theirs no more.
    co_lead = user_make(username="colin")
    member_add(study=two_sites, user=co_lead, role=LEAD)
    response = client.post(_remove_url(own))
    assert response.status_code == 302 and response["Location"] == reverse("home")
    assert not StudyMember.objects.filter(pk=own.pk).exists()
    assert client.get(_team_url(two_sites)).status_code == 404


def test_an_admin_may_remove_a_studys_only_lead(admin_member_client, two_sites, lead):
    own = StudyMember.objects.get(study=two_sites, user=lead, role=LEAD)
    assert admin_member_client.post(_remove_url(own)).status_code == 302
    assert not StudyMember.objects.filter(study=two_sites, role=LEAD).exists()


def test_leads_find_the_team_page_in_the_study_list(client, two_sites, lead):
    other_study = study_make(name="Read only", conversations=1)
    member_add(study=other_study, user=lead, role=MEMBER_RESEARCHER)
    client.force_login(lead)
    html = client.get(reverse("analysis:study_list")).content.decode()
    assert f'href="{_team_url(two_sites)}"' in html
    assert f'href="{_team_url(other_study)}"' not in html


def test_a_lead_invites_a_clinician_and_a_bad_invitation_makes_nothing(db, client):
    """The success path, with the e-mail that arrives, is tests/annotation/test_mail.py's."""
    from django.contrib.auth import get_user_model

    study = study_make(name="Invited study", conversations=1)
    other = study_make(name="Not theirs", conversations=1)
    lead = user_make(username="lead-inviting")
    member_add(study=study, user=lead, role=LEAD)
    client.force_login(lead)
    url = reverse("annotation:manage_team_invite", args=[study.pk])
    User = get_user_model()

    made = client.post(url, {"username": "dr_new", "email": "new@h.example", "site": "East"})
    assert made.status_code == 302
    member = StudyMember.objects.get(study=study, user__username="dr_new")
    assert (member.role, member.site) == (CLINICIAN, "East")
    assert Rater.objects.filter(user=member.user, kind=Rater.Kind.CLINICIAN).exists()

    users = User.objects.count()
    taken = client.post(url, {"username": "DR_NEW", "email": "x@h.example", "site": ""})
    assert taken.status_code == 422 and "usernames ignore case" in taken.content.decode()
    assert taken.content.decode().count('id="id_username"') == 1  # two forms, no id twice
    no_address = client.post(url, {"username": "dr_other", "email": "", "site": ""})
    assert no_address.status_code == 422
    elsewhere = client.post(
        reverse("annotation:manage_team_invite", args=[other.pk]),
        {"username": "dr_third", "email": "t@h.example"},
    )
    assert elsewhere.status_code == 404
    assert User.objects.count() == users  # nothing half-made


def test_a_lead_sets_the_adjudication_thresholds_and_a_bad_one_writes_nothing(db, client):
    from annotation.adjudication_selectors import attribute_thresholds
    from annotation.models import AttributeThreshold

    study = study_make(name="Thresholds", conversations=1)
    lead = user_make(username="lead_th")
    member_add(study=study, user=lead, role=LEAD)
    client.force_login(lead)
    url = reverse("annotation:manage_team_thresholds", args=[study.pk])
    safety, empathy = (
        study.rubric.attributes.order_by("position").values_list("pk", flat=True)[i] for i in (0, 1)
    )
    page = client.get(reverse("annotation:manage_team", args=[study.pk])).content.decode()
    assert 'id="thresholds"' in page and "Adjudication thresholds" in page

    answer = client.post(url, {"study_threshold": "3", f"attribute_{safety}": "1"})
    assert answer.status_code == 302 and answer["Location"].endswith("#thresholds")
    study.refresh_from_db()
    assert study.adjudication_threshold == 3
    got = attribute_thresholds(study=study)
    assert got[safety] == 1 and got[empathy] == 3

    # Off the scale (1–5: at most 4 apart), on one attribute: refused by name, nothing written.
    answer = client.post(
        url, {"study_threshold": "2", f"attribute_{safety}": "", f"attribute_{empathy}": "9"}
    )
    assert answer.status_code == 422
    assert "is not from 1 to 4" in answer.content.decode()
    study.refresh_from_db()
    assert study.adjudication_threshold == 3
    assert attribute_thresholds(study=study)[safety] == 1

    # Blank again: the attribute follows the study's threshold.
    assert client.post(url, {"study_threshold": "2", f"attribute_{safety}": ""}).status_code == 302
    assert not AttributeThreshold.objects.filter(study=study).exists()
    study.refresh_from_db()
    assert set(attribute_thresholds(study=study).values()) == {2}

    # A clinician of the study, or a lead of another, finds no such page.
    other = user_make(username="lead_else")
    member_add(study=study_make(name="Elsewhere", conversations=1), user=other, role=LEAD)
    client.force_login(other)
    assert client.post(url, {"study_threshold": "1"}).status_code == 404
    study.refresh_from_db()
    assert study.adjudication_threshold == 2
