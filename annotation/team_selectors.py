"""Reads for a study's team: its members, and the clinicians' progress per site and per person.

The study page's progress step and the team page (team_views.py) render what these return; the
numbers come from two aggregate queries whatever the study's size (docs/lead-journey.md).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from django.db.models import Count, Max, Q
from django.utils import timezone

from .models import Assignment, Study, StudyMember
from .selectors import NOT_COUNTED

#: The name a clinician without a site is counted under.
NO_SITE = "no site"

# A clinician's status, one word a lead scans for; the order is the precedence (see
# ClinicianRow.status).
NOTHING_ASSIGNED = "nothing assigned"
NOT_STARTED = "not started"
OVERDUE = "overdue"
DONE = "done"
IN_PROGRESS = "in progress"


@dataclass(frozen=True)
class ClinicianRow:
    """One clinician's work in a study: real work only (practice, repeats, flagged and
    reclaimed work left out)."""

    name: str
    site: str  # NO_SITE when their membership names none
    assigned: int = 0
    submitted: int = 0
    in_progress: int = 0
    open: int = 0
    started: bool = False  # anything opened: in progress, submitted, or flagged
    last_activity: datetime.datetime | None = None
    flagged: int = 0  # set aside by the clinician; not among `assigned`
    submitted_week: int = 0  # submitted in the 7 days before the progress was read
    #: Open work past the study's deadline, or (with no deadline) open work untouched for
    #: longer than the study's stale_after_days. Kept apart from `status`, so that a
    #: clinician who never started and is past the deadline counts among both.
    overdue: bool = False

    @property
    def status(self) -> str:
        """Not started before overdue: a lead who reads "not started" knows the clinician has
        opened nothing, which "overdue" alone would hide (the row still says overdue)."""
        if not self.assigned:
            return NOTHING_ASSIGNED
        if not self.submitted and not self.started:
            return NOT_STARTED
        if self.overdue:
            return OVERDUE
        if not self.open:
            return DONE
        return IN_PROGRESS


@dataclass
class SiteRow:
    """A site's totals (or, as TeamProgress.total, every site's)."""

    site: str
    clinicians: int = 0
    assigned: int = 0
    submitted: int = 0
    not_started: int = 0
    overdue: int = 0  # clinicians with overdue work, whether or not they started
    open: int = 0
    flagged: int = 0
    submitted_week: int = 0

    @property
    def percent_done(self) -> int | None:
        """Submitted of assigned, in whole percent (rounded down: 100 only when all is done);
        None when nothing is assigned."""
        return 100 * self.submitted // self.assigned if self.assigned else None

    def add(self, row: ClinicianRow) -> None:
        self.clinicians += 1
        self.assigned += row.assigned
        self.submitted += row.submitted
        self.not_started += row.status == NOT_STARTED
        self.overdue += row.overdue
        self.open += row.open
        self.flagged += row.flagged
        self.submitted_week += row.submitted_week


@dataclass
class TeamProgress:
    """A study's progress per site and per clinician, with the rule that made "overdue"."""

    deadline: datetime.date | None
    past_deadline: bool
    stale_after_days: int
    clinicians: list[ClinicianRow] = field(default_factory=list)
    sites: list[SiteRow] = field(default_factory=list)
    total: SiteRow = field(default_factory=lambda: SiteRow("all sites"))


def _rating_work(study: Study):
    """The study's rating work as the team's progress counts it: neither practice nor
    repeats, and not what was reclaimed (it went to someone else)."""
    rating = Assignment.objects.filter(conversation__study=study, kind=Assignment.Kind.RATING)
    return rating.exclude(status=Assignment.Status.RECLAIMED)


def conversations_progress(*, study: Study) -> tuple[int, int]:
    """How many conversations the study's clinicians were given, and how many of them are done
    (every task on them submitted), counted over the same work as team_progress."""
    rows = (
        _rating_work(study)
        .values("conversation_id")
        .annotate(undone=Count("id", filter=~Q(status=Assignment.Status.SUBMITTED)))
        .order_by()
    )
    given = done = 0
    for row in rows:
        given += 1
        done += not row["undone"]
    return given, done


def team_progress(*, study: Study, now: datetime.datetime | None = None) -> TeamProgress:
    """Every clinician member of ``study`` and every clinician with rating work in it, with
    their work and status, and the totals per site (sites by name, NO_SITE last).

    Two queries: the assignments counted per rater, and the study's memberships (for the
    sites and the members with no work yet).
    """
    now = now or timezone.now()
    today = timezone.localdate(now)
    past_deadline = study.deadline is not None and today > study.deadline
    is_open = Q(status__in=Assignment.OPEN_STATUSES)
    late: Q | None = None  # before the deadline nothing is late
    if past_deadline:
        late = is_open
    elif study.deadline is None:
        # As Assignment.is_stale_at: untouched since its last activity, or since it was given.
        limit = now - datetime.timedelta(days=study.stale_after_days)
        late = is_open & (
            Q(last_activity_at__lt=limit) | Q(last_activity_at__isnull=True, created_at__lt=limit)
        )
    counted = ~Q(status__in=NOT_COUNTED)
    extra = {"late": Count("id", filter=late)} if late is not None else {}
    work = (
        _rating_work(study)
        .values("rater_id", "rater__name", "rater__user_id", "rater__user__username")
        .annotate(
            assigned=Count("id", filter=counted),
            submitted=Count("id", filter=Q(status=Assignment.Status.SUBMITTED)),
            in_progress=Count("id", filter=Q(status=Assignment.Status.IN_PROGRESS)),
            open=Count("id", filter=is_open),
            started=Count("id", filter=~Q(status=Assignment.Status.PENDING)),
            flagged=Count("id", filter=Q(status=Assignment.Status.FLAGGED)),
            submitted_week=Count(
                "id",
                filter=Q(
                    status=Assignment.Status.SUBMITTED,
                    submitted_at__gte=now - datetime.timedelta(days=7),
                ),
            ),
            last_activity=Max("last_activity_at"),
            **extra,
        )
        .order_by()
    )
    work_rows = list(work)
    user_ids = {w["rater__user_id"] for w in work_rows if w["rater__user_id"]}
    # A clinician's site is their clinician membership's; someone given work without one (a
    # lead who also rates) takes the site of another role they hold in the study.
    sites: dict[int, str] = {}
    members: dict[int, str] = {}  # clinician members: user id → username
    for user_id, username, role, site in (
        StudyMember.objects.filter(study=study)
        .filter(Q(role=StudyMember.Role.CLINICIAN) | Q(user_id__in=user_ids))
        .order_by("role")  # "clinician" sorts first: its site wins
        .values_list("user_id", "user__username", "role", "site")
    ):
        if site.strip() and user_id not in sites:
            sites[user_id] = site.strip()
        if role == StudyMember.Role.CLINICIAN:
            members[user_id] = username

    rows: list[ClinicianRow] = []
    for w in work_rows:
        user_id = w["rater__user_id"]
        members.pop(user_id, None)
        rows.append(
            ClinicianRow(
                name=w["rater__user__username"] or w["rater__name"],
                site=sites.get(user_id, NO_SITE),
                assigned=w["assigned"],
                submitted=w["submitted"],
                in_progress=w["in_progress"],
                open=w["open"],
                started=bool(w["started"]),
                last_activity=w["last_activity"],
                flagged=w["flagged"],
                submitted_week=w["submitted_week"],
                overdue=bool(w.get("late")),
            )
        )
    rows.extend(
        ClinicianRow(name=username, site=sites.get(user_id, NO_SITE))
        for user_id, username in members.items()
    )
    rows.sort(key=lambda r: (r.site == NO_SITE, r.site.casefold(), r.name.casefold()))

    progress = TeamProgress(
        deadline=study.deadline,
        past_deadline=past_deadline,
        stale_after_days=study.stale_after_days,
        clinicians=rows,
    )
    per_site: dict[str, SiteRow] = {}
    for row in rows:
        per_site.setdefault(row.site, SiteRow(row.site)).add(row)
        progress.total.add(row)
    progress.sites = list(per_site.values())  # already in the rows' order
    return progress


@dataclass(frozen=True)
class MemberRow:
    pk: int
    username: str
    role: str
    role_label: str
    site: str
    is_self: bool


def team_members(*, study: Study, viewer) -> list[MemberRow]:
    """The study's members, leads first, for the team page (one query)."""
    order = {role: i for i, role in enumerate(StudyMember.Role.values)}
    labels = dict(StudyMember.Role.choices)
    members = StudyMember.objects.filter(study=study).values_list(
        "pk", "user_id", "user__username", "role", "site"
    )
    rows = [
        MemberRow(
            pk=pk,
            username=username,
            role=role,
            role_label=labels.get(role, role),
            site=site,
            is_self=user_id == viewer.pk,
        )
        for pk, user_id, username, role, site in members
    ]
    rows.sort(key=lambda m: (order.get(m.role, len(order)), m.username.casefold()))
    return rows
