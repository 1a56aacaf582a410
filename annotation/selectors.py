"""Reads for the annotation app (services write, selectors read: docs/architecture.md).

Everything a clinician fetches goes through `assignment_get_for_user`, which answers 404 for
anything that is not theirs. What is handed to clinician-facing templates is built here from
plain values, so a template cannot reach a response's responder, pk or metadata by accident.
"""

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Case, Count, Sum, When
from django.http import Http404

from .escalation_selectors import unsafe_marks
from .models import (
    Assignment,
    AssignmentItem,
    Attribute,
    ClinicianSample,
    DistortionLabel,
    LabelAnnotation,
    LabelChange,
    Rater,
    Rating,
    RatingChange,
    Response,
    Score,
    Study,
)

# What a "done" count counts: submitted work, per kind of task (conversations, messages to label,
# practice, repeats, added responses: task_kind). Flagged work was set aside, not done, and leaves
# the total too. Submitted work never reopens (a top-up adds a part), so "done" never goes back.
NOT_COUNTED = (Assignment.Status.RECLAIMED, Assignment.Status.FLAGGED)


def assignment_get_for_user(*, user, token: str) -> Assignment:
    """The user's own assignment with this token, or 404 (also for reclaimed work)."""
    assignment = (
        Assignment.objects.filter(token=token, rater__user_id=user.pk)
        .exclude(status=Assignment.Status.RECLAIMED)
        .select_related("conversation__study")
        .first()
    )
    if assignment is None:
        raise Http404("No such assignment")
    return assignment


def assignments_for_user(*, user):
    """The user's tasks they may open now: every assignment but reclaimed work and real work
    that waits for their practice result (``waiting_for_training_q``)."""
    from .training import waiting_for_training_q

    return (
        _own(user=user)
        # Real work waits until the clinician has passed the study's training (if they have any).
        .exclude(waiting_for_training_q(user=user))
        .order_by("created_at", "token")
    )


def _own(*, user):
    return (
        Assignment.objects.filter(rater__user_id=user.pk)
        .exclude(status=Assignment.Status.RECLAIMED)
        .select_related("conversation__study")
    )


# The kinds of task a clinician's queue tells apart, with what one of each is called (one, many).
# A test-retest repeat is not one of them: it comes back unmarked, as a conversation like any
# other (a repeat the clinician can tell apart measures nothing).
TASK_KINDS: dict[str, tuple[str, str]] = {
    "rating": ("conversation", "conversations"),
    "label": ("message to label", "messages to label"),
    "practice": ("practice conversation", "practice conversations"),
    "added": ("conversation with added responses", "conversations with added responses"),
}


def task_kind(*, assignment: Assignment) -> str:
    """What kind of task an assignment is to the clinician (a key of TASK_KINDS)."""
    if assignment.kind == Assignment.Kind.PRACTICE:
        return "practice"
    if assignment.part:
        return "added"
    if assignment.conversation.study.kind == Study.Kind.DISTORTION_LABELLING:
        return "label"
    return "rating"


@dataclass
class KindProgress:
    kind: str
    done: int
    total: int

    @property
    def noun(self) -> str:
        one, many = TASK_KINDS[self.kind]
        return one if self.total == 1 else many


@dataclass
class Progress:
    """Done / assigned per kind of task (flagged and reclaimed work left out); ``kind`` picks
    the bar's kind (the open task's, on its page), else the bar shows every task."""

    kinds: list[KindProgress]
    kind: str | None = None

    def _shown(self) -> list[KindProgress]:
        return [k for k in self.kinds if self.kind is None or k.kind == self.kind]

    @property
    def done(self) -> int:
        return sum(k.done for k in self._shown())

    @property
    def total(self) -> int:
        return sum(k.total for k in self._shown())

    @property
    def percent(self) -> int:
        return round(100 * self.done / self.total) if self.total else 0


def progress_for_user(*, user, kind: str | None = None) -> Progress:
    """Per kind of task, how many the clinician submitted of those assigned to them, work that
    waits for their practice result included (it is theirs, only not yet open)."""
    counts: dict[str, list[int]] = {k: [0, 0] for k in TASK_KINDS}
    for assignment in (
        _own(user=user)
        .exclude(status__in=NOT_COUNTED)
        .only("kind", "part", "status", "conversation__study__kind")
    ):
        pair = counts[task_kind(assignment=assignment)]
        pair[1] += 1
        pair[0] += assignment.status == Assignment.Status.SUBMITTED
    return Progress(
        kinds=[KindProgress(k, done, total) for k, (done, total) in counts.items() if total],
        kind=kind,
    )


def next_assignment_for_user(*, user, kind: str | None = None) -> Assignment | None:
    """The task to open next: practice first (training comes before real work), in-progress
    work before unstarted (resume where one stopped), oldest first; with ``kind``, a task of
    that kind when one is open (after a message is labelled, the next message to label)."""
    open_ = assignments_for_user(user=user).filter(
        status__in=[Assignment.Status.IN_PROGRESS, Assignment.Status.PENDING]
    )
    practice_first = Case(When(kind=Assignment.Kind.PRACTICE, then=0), default=1)
    ordered = list(open_.order_by(practice_first, "status", "created_at", "token"))
    if kind is not None and ordered and ordered[0].kind != Assignment.Kind.PRACTICE:
        same = [a for a in ordered if task_kind(assignment=a) == kind]
        if same:
            return same[0]
    return ordered[0] if ordered else None


@dataclass
class QueueRow:
    assignment: Assignment
    kind: str
    #: Real work that opens once the clinician passes the study's practice.
    waiting: bool


@dataclass
class TrainingNote:
    study: Study
    failed: bool  # the practice was submitted and did not meet the study's rule
    waiting: int  # tasks of the study that wait for the result


@dataclass
class Queue:
    rows: list[QueueRow]
    notes: list[TrainingNote]


def queue_for_user(*, user) -> Queue:
    """Every task of the clinician, practice beside real work: each with its kind, and real
    work that waits for a practice result shown as waiting (not hidden), with a note per such
    study saying what happens next."""
    from .models import TrainingOutcome

    openable = set(assignments_for_user(user=user).values_list("pk", flat=True))
    rows = [
        QueueRow(a, task_kind(assignment=a), a.pk not in openable)
        for a in _own(user=user).order_by("created_at", "token")
    ]
    failed = set(
        TrainingOutcome.objects.filter(rater__user_id=user.pk, passed=False).values_list(
            "study_id", flat=True
        )
    )
    waiting: Counter[int] = Counter(r.assignment.conversation.study_id for r in rows if r.waiting)
    studies = {r.assignment.conversation.study_id: r.assignment.conversation.study for r in rows}
    notes = [
        TrainingNote(studies[study_id], study_id in failed, count)
        for study_id, count in waiting.items()
    ]
    return Queue(rows=rows, notes=notes)


@dataclass
class Level:
    value: int
    anchor: str


@dataclass
class AttributeView:
    id: int
    name: str
    description: str
    group: str
    levels: list[Level]


@dataclass
class ItemView:
    """One response as a clinician sees it: nothing here can tell who wrote it."""

    token: str
    label: str
    text: str
    rationale: str
    # [(group code, group label, [(attribute, chosen score or None)])], ready for the template.
    groups: list[tuple[str, str, list[tuple["AttributeView", int | None]]]]
    missing: list[str] = field(default_factory=list)
    # Rated and submitted in an earlier part of the conversation: shown read-only.
    earlier: bool = False
    # The reason of the clinician's own open "unsafe" mark on this response; "" when none.
    unsafe: str = ""
    unsafe_error: str = ""  # why a mark sent without JavaScript was refused

    @property
    def scored(self) -> int:
        return sum(chosen is not None for _, _, rows in self.groups for _, chosen in rows)

    @property
    def total(self) -> int:
        return sum(len(rows) for _, _, rows in self.groups)


@dataclass
class RatingPage:
    assignment: Assignment
    context: str
    items: list[ItemView]
    groups: list[tuple[str, str, list[AttributeView]]]  # (code, label, attributes)
    locked: bool
    rationale_required: bool = False
    rationale_min_length: int = 0
    # A practice conversation is training material: nothing in it is escalated.
    practice: bool = False

    @property
    def scored(self) -> int:
        return sum(item.scored for item in self.items if not item.earlier)

    @property
    def total(self) -> int:
        return sum(item.total for item in self.items if not item.earlier)

    @property
    def has_earlier(self) -> bool:
        return any(item.earlier for item in self.items)


def rubric_in_use(*, rubric_id: int | None) -> bool:
    """Scores exist on the rubric's attributes: its scale, attribute names, groups, positions and
    level values now give stored scores their meaning (and exports and re-imports match on them),
    so they are no longer edited. Wording (descriptions, anchors) may still be corrected."""
    return rubric_id is not None and Score.objects.filter(attribute__rubric_id=rubric_id).exists()


def study_has_work(*, study_id: int) -> bool:
    """Ratings or labels exist in the study (drafts and practice too): its rubric, kind and
    label scheme are what they were given on."""
    return (
        Rating.objects.filter(response__conversation__study_id=study_id).exists()
        or LabelAnnotation.objects.filter(conversation__study_id=study_id).exists()
    )


def conversation_has_work(*, conversation_id: int) -> bool:
    """Ratings of its responses or labels of it exist: what was rated is fixed."""
    return (
        Rating.objects.filter(response__conversation_id=conversation_id).exists()
        or LabelAnnotation.objects.filter(conversation_id=conversation_id).exists()
    )


def rater_has_work(*, rater_id: int) -> bool:
    return (
        Rating.objects.filter(rater_id=rater_id).exists()
        or LabelAnnotation.objects.filter(rater_id=rater_id).exists()
    )


def responder_has_responses(*, responder_id: int) -> bool:
    return Response.objects.filter(responder_id=responder_id).exists()


def rubric_groups(*, rubric_id: int) -> list[tuple[str, str, list[AttributeView]]]:
    """A rubric's attributes with their anchors, grouped as (code, label, attributes)."""
    attributes = [
        AttributeView(
            id=a.pk,
            name=a.name,
            description=a.description,
            group=a.group,
            levels=sorted(
                (Level(value=lv.value, anchor=lv.anchor) for lv in a.levels.all()),
                key=lambda lv: lv.value,
            ),
        )
        for a in Attribute.objects.filter(rubric_id=rubric_id).prefetch_related("levels")
    ]
    labels = dict(Attribute.Group.choices)
    groups: list[tuple[str, str, list[AttributeView]]] = []
    for attribute in attributes:
        if not groups or groups[-1][0] != attribute.group:
            groups.append((attribute.group, labels.get(attribute.group, ""), []))
        groups[-1][2].append(attribute)
    return groups


def guideline_studies(*, user) -> list[tuple[Study, list[tuple[str, str, list[AttributeView]]]]]:
    """The response-rating studies a clinician has work in, each with its rubric."""
    studies = (
        Study.objects.filter(
            kind=Study.Kind.RESPONSE_RATING,
            conversations__assignments__in=assignments_for_user(user=user),
        )
        .distinct()
        .order_by("name")
    )
    return [(study, rubric_groups(rubric_id=study.rubric_id)) for study in studies]


def rating_page(*, assignment: Assignment) -> RatingPage:
    study = assignment.conversation.study
    groups = rubric_groups(rubric_id=study.rubric_id)

    items = list(
        AssignmentItem.objects.filter(assignment=assignment)
        .order_by("position")
        .values("token", "position", "response_id", "response__text", "earlier")
    )
    ratings = {
        r["response_id"]: r
        for r in Rating.objects.filter(
            rater_id=assignment.rater_id,
            response_id__in=[i["response_id"] for i in items],
            run=None,
            repeat=assignment.rating_repeat,
        ).values("id", "response_id", "rationale")
    }
    scores: dict[int, dict[int, int]] = {}
    for rating_id, attribute_id, value in Score.objects.filter(
        rating_id__in=[r["id"] for r in ratings.values()]
    ).values_list("rating_id", "attribute_id", "value"):
        scores.setdefault(rating_id, {})[attribute_id] = value
    unsafe = unsafe_marks(assignment=assignment)
    views = []
    for item in items:
        rating = ratings.get(item["response_id"])
        chosen = scores.get(rating["id"], {}) if rating else {}
        views.append(
            ItemView(
                token=item["token"],
                label=AssignmentItem(position=item["position"]).label,
                text=item["response__text"],
                rationale=rating["rationale"] if rating else "",
                groups=[
                    (code, label, [(a, chosen.get(a.id)) for a in group])
                    for code, label, group in groups
                ],
                earlier=item["earlier"],
                unsafe=unsafe.get(item["response_id"], ""),
            )
        )
    return RatingPage(
        assignment=assignment,
        context=assignment.conversation.context,
        items=views,
        groups=groups,
        locked=assignment.status not in Assignment.OPEN_STATUSES,
        rationale_required=study.rationale_required,
        rationale_min_length=study.rationale_min_length,
        practice=assignment.kind == Assignment.Kind.PRACTICE,
    )


# --- Admin reads ---------------------------------------------------------------------------------


@dataclass
class ClinicianProgress:
    rater: Rater
    counts: Counter  # real work (practice aside) by status
    active_seconds: int
    practice: tuple[int, int] = (0, 0)  # practice conversations submitted, assigned
    added: tuple[int, int] = (0, 0)  # tasks of responses added later (top-up): submitted, assigned

    @property
    def total(self) -> int:
        """Real work assigned, flagged and reclaimed work left out (the table shows flags)."""
        return sum(v for k, v in self.counts.items() if k not in NOT_COUNTED)

    @property
    def done(self) -> int:
        return self.counts[Assignment.Status.SUBMITTED]

    @property
    def started(self) -> bool:
        return any(self.counts.get(k) for k in ("in_progress", "submitted", "flagged")) or bool(
            self.practice[0]
        )


def clinician_progress(*, study=None) -> list[ClinicianProgress]:
    """Every clinician with an account, with their work (in `study` when given): real work by
    status, practice and added responses apart."""
    rows = Assignment.objects.all()
    if study is not None:
        rows = rows.filter(conversation__study=study)
    per: dict[int, Counter] = {}
    practice: dict[int, list[int]] = {}
    added: dict[int, list[int]] = {}
    seconds: Counter = Counter()
    for rater_id, status, kind, part, n, active in rows.values_list(
        "rater_id", "status", "kind", "part"
    ).annotate(n=Count("id"), active=Sum("active_seconds")):
        if kind == Assignment.Kind.PRACTICE:
            pair = practice.setdefault(rater_id, [0, 0])
        else:
            per.setdefault(rater_id, Counter())[status] += n
            seconds[rater_id] += active or 0
            if not part or status in NOT_COUNTED:
                continue
            pair = added.setdefault(rater_id, [0, 0])
        pair[1] += n
        pair[0] += n if status == Assignment.Status.SUBMITTED else 0
    raters = Rater.objects.filter(kind=Rater.Kind.CLINICIAN, user__isnull=False).select_related(
        "user"
    )
    return [
        ClinicianProgress(
            rater=r,
            counts=per.get(r.pk, Counter()),
            active_seconds=seconds[r.pk],
            practice=tuple(practice.get(r.pk, (0, 0))),  # type: ignore[arg-type]
            added=tuple(added.get(r.pk, (0, 0))),  # type: ignore[arg-type]
        )
        for r in raters
    ]


def assignments_for_admin(*, study=None):
    rows = Assignment.objects.select_related("rater", "conversation__study").order_by(
        "conversation__study__name", "conversation_id", "rater__name"
    )
    if study is not None:
        rows = rows.filter(conversation__study=study)
    return rows


def rating_changes(*, study=None):
    rows = RatingChange.objects.select_related(
        "rating__rater",
        "rating__response__responder",
        "rating__response__conversation__study",
        "attribute",
        "changed_by",
    ).order_by("changed_at", "id")
    if study is not None:
        rows = rows.filter(rating__response__conversation__study=study)
    return rows


# --- Distortion labelling -----------------------------------------------------------------------


@dataclass
class LabelOption:
    name: str
    definition: str
    example: str


@dataclass
class LabelPage:
    """What a clinician sees when labelling: the message and the label set, nothing else
    (no other rater's or LLM run's labels: blinding)."""

    assignment: Assignment
    context: str
    scheme: str
    options: list[LabelOption]
    dominant: str | None
    secondary: str | None
    chosen: list[str]
    locked: bool


def label_page(*, assignment: Assignment) -> LabelPage:
    study = assignment.conversation.study
    options = [
        LabelOption(name=name, definition=definition, example=example)
        for name, definition, example in DistortionLabel.objects.filter(study=study)
        .order_by("position")
        .values_list("name", "definition", "example")
    ]
    # Only this rater's own form annotation: never a run's or another clinician's.
    chosen = (
        LabelAnnotation.objects.filter(
            rater_id=assignment.rater_id,
            conversation_id=assignment.conversation_id,
            run=None,
            repeat=0,
        )
        .values_list("labels", flat=True)
        .first()
    ) or []
    return LabelPage(
        assignment=assignment,
        context=assignment.conversation.context,
        scheme=study.label_scheme,
        options=options,
        dominant=chosen[0] if chosen else None,
        secondary=chosen[1] if len(chosen) > 1 else None,
        chosen=list(chosen),
        locked=assignment.status not in Assignment.OPEN_STATUSES,
    )


def label_changes(*, study=None):
    """Audit trail of clinicians' distortion labels (LabelChange), oldest first."""
    rows = LabelChange.objects.select_related(
        "annotation__rater", "annotation__conversation__study", "changed_by"
    ).order_by("changed_at", "id")
    if study is not None:
        rows = rows.filter(annotation__conversation__study=study)
    return rows


def study_rubric(*, study_id: int) -> list[dict[str, Any]]:
    """The study's rubric as the plain data judging.prompts renders."""
    rubric_id = Study.objects.values_list("rubric_id", flat=True).get(id=study_id)
    attributes = (
        Attribute.objects.filter(rubric_id=rubric_id)
        .prefetch_related("levels")
        .order_by("position")
    )
    return [
        {
            "id": attribute.id,
            "name": attribute.name,
            "group": attribute.group,
            "description": attribute.description,
            "anchors": {level.value: level.anchor for level in attribute.levels.all()},
        }
        for attribute in attributes
    ]


def study_distortion_labels(*, study_id: int) -> list[dict[str, str]]:
    """The study's label set in the shape prompts and the parser take."""
    return [
        {
            "name": name,
            "prompt_label": prompt_label or name,
            "description": definition,
            "example": example,
        }
        for name, prompt_label, definition, example in DistortionLabel.objects.filter(
            study_id=study_id
        )
        .order_by("position")
        .values_list("name", "prompt_label", "definition", "example")
    ]


def study_label_names(*, study_id: int) -> list[str]:
    return list(
        DistortionLabel.objects.filter(study_id=study_id)
        .order_by("position")
        .values_list("name", flat=True)
    )


def clinician_sample_current(*, study: Study) -> ClinicianSample | None:
    """The study's design: its latest clinician sample, or None when it has none."""
    return ClinicianSample.objects.filter(study=study).order_by("-created_at", "-id").first()


def clinician_sample_external_ids(*, sample: ClinicianSample) -> set[str]:
    return set(sample.conversations.values_list("external_id", flat=True))


def studies_awaiting_consent(*, user) -> list:
    """The studies with open work for `user` whose consent text they have not accepted (in its
    latest version), for the queue to lead them to it first."""
    from .services.consent import consent_refusal

    rater = Rater.objects.filter(user=user).first()
    if rater is None:
        return []
    studies = Study.objects.filter(
        conversations__assignments__rater=rater,
        conversations__assignments__status__in=Assignment.OPEN_STATUSES,
        consent_texts__isnull=False,
    ).distinct()
    return [s for s in studies.order_by("name") if consent_refusal(study_id=s.pk, rater=rater)]


#: Counts under this are shown as "fewer than 3" in what a release says about its clinicians:
#: a specialty held by one rater of a small study would name them.
SMALL_CELL = 3
YEARS_BANDS = ((0, 4, "under 5 years"), (5, 9, "5-9 years"), (10, 19, "10-19 years"))


@dataclass(frozen=True)
class CliniciansSummary:
    clinicians: int
    specialties: list[tuple[str, str]]  # (specialty, count as shown)
    years: list[tuple[str, str]]
    consents: list[tuple[int, int, int]]  # (version, accepted, withdrawn)


def _shown(n: int) -> str:
    return str(n) if n == 0 or n >= SMALL_CELL else f"fewer than {SMALL_CELL}"


def clinicians_summary(*, study: Study) -> CliniciansSummary:
    """What a study's release says about the clinicians who rated it, naming no one: counts by
    specialty and years in practice (small cells masked), and each consent version's
    acceptances and withdrawals."""
    from .models import ClinicianCredentials, ConsentRecord

    raters = Rater.objects.filter(
        kind=Rater.Kind.CLINICIAN, ratings__response__conversation__study=study
    ).distinct()
    credentials = {c.rater_id: c for c in ClinicianCredentials.objects.filter(rater__in=raters)}
    specialties: dict[str, int] = {}
    years: dict[str, int] = {}
    for rater_id in raters.values_list("id", flat=True):
        c = credentials.get(rater_id)
        specialty = (c.specialty.strip().lower() if c else "") or "not given"
        specialties[specialty] = specialties.get(specialty, 0) + 1
        band = "not given"
        if c is not None and c.years_in_practice is not None:
            band = next(
                (label for low, high, label in YEARS_BANDS if low <= c.years_in_practice <= high),
                "20 years or more",
            )
        years[band] = years.get(band, 0) + 1
    consents = [
        (
            version,
            ConsentRecord.objects.filter(
                consent_text__study=study, consent_text__version=version
            ).count(),
            ConsentRecord.objects.filter(
                consent_text__study=study, consent_text__version=version, withdrawn_at__isnull=False
            ).count(),
        )
        for version in study.consent_texts.order_by("version").values_list("version", flat=True)
    ]
    return CliniciansSummary(
        clinicians=raters.count(),
        specialties=[(k, _shown(v)) for k, v in sorted(specialties.items())],
        years=[(k, _shown(v)) for k, v in sorted(years.items())],
        consents=consents,
    )
