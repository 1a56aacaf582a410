"""A study's progress per site and per clinician (team_selectors.team_progress)."""

from __future__ import annotations

import datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from annotation.membership import CLINICIAN, member_add
from annotation.models import Assignment
from annotation.team_selectors import (
    DONE,
    IN_PROGRESS,
    NO_SITE,
    NOT_STARTED,
    NOTHING_ASSIGNED,
    OVERDUE,
    team_progress,
)
from tests.factories import clinician_make, study_make

S = Assignment.Status


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
