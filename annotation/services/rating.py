"""The clinician rating workflow: assignments, autosave, submit, flag, reassign, reclaim.

Every write to one assignment locks its row first, so two tabs' saves run one at a time.
"""

import random
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from accounts.roles import CLINICIAN
from accounts.users import user_create

from ..membership import CLINICIAN as MEMBER_CLINICIAN
from ..membership import member_add, members_ensure
from ..models import (
    Assignment,
    AssignmentItem,
    Attribute,
    AttributeLevel,
    Conversation,
    LabelAnnotation,
    Rater,
    Rating,
    RatingChange,
    Response,
    Score,
    Study,
    Webhook,
)
from ..rater_codes import rater_codes_assign
from .consent import consent_refusal
from .importing import BATCH
from .webhooks import webhook_emit, webhooks_any

# A heartbeat adds at most this many seconds: the page sends one every 15 s while it is visible
# and was used in the last minute, so a longer gap means the clinician was away.
HEARTBEAT_MAX_SECONDS = 20
# Edit clocks come from the browser; one far in the future would lock every later edit out.
CLOCK_SKEW_MS = 60_000

OPEN = Assignment.OPEN_STATUSES


class AssignmentLocked(Exception):
    """The assignment was submitted, flagged or reclaimed: it takes no more edits."""


class AssignmentIncomplete(Exception):
    def __init__(self, missing: list[tuple[str, list[str]]]):
        self.missing = missing  # [("A", ["Safety", "Empathy"]), …] in display order
        super().__init__(
            "; ".join(f"Response {label}: {', '.join(names)} missing" for label, names in missing)
        )


@dataclass
class SaveResult:
    saved: bool  # False: a newer edit (another tab) was already stored and is kept
    value: int | str | None  # what is stored now


def assignment_items_shuffled(
    *, assignment: Assignment, responses: list[Response], seed: int
) -> list[AssignmentItem]:
    """The assignment's items, unsaved: `responses` in the order `seed` draws."""
    # The order is a function of the recorded seed alone (responses sorted by pk first), so the
    # export can re-derive and check it; it is also stored, so a reload never re-draws it.
    ordered = sorted(responses, key=lambda r: r.pk)
    random.Random(seed).shuffle(ordered)
    return [
        AssignmentItem(assignment=assignment, response=response, position=position)
        for position, response in enumerate(ordered)
    ]


@transaction.atomic
def assignments_create(
    *,
    study: Study,
    clinicians: list[Rater],
    overlap: int = 1,
    overlap_fraction: float = 0.0,
    seed_rng: random.Random | None = None,
    conversations: Collection[int] | None = None,
) -> list[Assignment]:
    """Give every conversation of the study to one clinician, and `overlap_fraction` of them
    (1.0 = all) to `overlap` clinicians in all, for inter-rater agreement.

    Balanced: each copy goes to the clinician with the fewest assignments in the study so far
    (ties broken by name). Conversations already assigned count towards their overlap, so running
    it again, or after importing more conversations, only adds what is missing. Conversations
    without response texts (MentalAlign import) are skipped; a distortion study assigns every
    conversation (clinicians label its user message). `seed_rng` makes the permutation
    seeds reproducible (tests); otherwise each assignment gets a fresh random seed.
    ``conversations`` (primary keys) limits it to those, e.g. the study's clinician sample.
    """
    if not clinicians:
        raise ValueError("choose at least one clinician")
    if any(c.kind != Rater.Kind.CLINICIAN for c in clinicians):
        raise ValueError("only clinicians can be assigned conversations")
    if not 1 <= overlap <= len(clinicians):
        raise ValueError(
            f"overlap must be between 1 and the number of clinicians ({len(clinicians)})"
        )
    if not 0.0 <= overlap_fraction <= 1.0:
        raise ValueError("the overlap fraction must be between 0 and 1")

    # Two admins assigning the same study at once would both see the same load: one waits.
    Study.objects.select_for_update().filter(pk=study.pk).first()
    responses: dict[int, list[Response]] = {}
    if study.kind == Study.Kind.DISTORTION_LABELLING:
        # Clinicians label the user's message itself: every conversation, no responses shown.
        for conversation_id in Conversation.objects.filter(study=study).values_list(
            "id", flat=True
        ):
            responses[conversation_id] = []
    else:
        # Practice conversations are training material, never real work.
        for response in Response.objects.filter(
            conversation__study=study, conversation__practice=False
        ).exclude(text=""):
            responses.setdefault(response.conversation_id, []).append(response)
    if conversations is not None:
        wanted_ids = set(conversations)
        responses = {pk: rs for pk, rs in responses.items() if pk in wanted_ids}
    conversation_ids = sorted(responses)
    # Practice and repeat assignments are not part of the overlap or of a clinician's load.
    real = Assignment.objects.filter(conversation__study=study, kind=Assignment.Kind.RATING)
    live = real.exclude(status=Assignment.Status.RECLAIMED)
    holders: dict[int, set[int]] = {c: set() for c in conversation_ids}
    for conversation_id, rater_id in live.values_list("conversation_id", "rater_id"):
        holders.setdefault(conversation_id, set()).add(rater_id)
    ever = set(real.values_list("conversation_id", "rater_id"))
    load = Counter(rater_id for ids in holders.values() for rater_id in ids)

    # Conversations that already have several raters count towards the overlapped fraction;
    # the rest are drawn at random, so the overlap is not "the first conversations".
    rng = seed_rng or random.Random()
    overlapped: set[int] = set()
    if overlap > 1:
        wanted = round(overlap_fraction * len(conversation_ids))
        shared = [c for c in conversation_ids if len(holders[c]) > 1]
        single = [c for c in conversation_ids if len(holders[c]) <= 1]
        overlapped = set(shared[:wanted])
        overlapped |= set(rng.sample(single, max(0, min(len(single), wanted - len(overlapped)))))

    new: list[Assignment] = []
    for conversation_id in conversation_ids:
        wanted = overlap if conversation_id in overlapped else 1
        have = holders.setdefault(conversation_id, set())
        while len(have) < wanted:
            candidates = [
                c for c in clinicians if c.pk not in have and (conversation_id, c.pk) not in ever
            ]
            if not candidates:
                break
            chosen = min(candidates, key=lambda c: (load[c.pk], c.name))
            have.add(chosen.pk)
            load[chosen.pk] += 1
            assignment = Assignment(rater=chosen, conversation_id=conversation_id)
            if seed_rng is not None:
                assignment.seed = seed_rng.getrandbits(63)
            new.append(assignment)
    Assignment.objects.bulk_create(new, batch_size=BATCH)
    items = [
        item
        for assignment in new
        for item in assignment_items_shuffled(
            assignment=assignment,
            responses=responses[assignment.conversation_id],
            seed=assignment.seed,
        )
    ]
    AssignmentItem.objects.bulk_create(items, batch_size=BATCH)
    # Given work in a study, a clinician has joined it: their study code, before anyone reads.
    rater_codes_assign(study_id=study.pk, rater_ids={a.rater_id for a in new})
    # Whoever is given work in a study is on its team (the study page's progress per site).
    members_ensure(
        study_id=study.pk,
        user_ids=[c.user_id for c in clinicians if c.user_id is not None],
        role=MEMBER_CLINICIAN,
    )
    return new


def _items_copy(*, source: Assignment, target: Assignment) -> None:
    responses = [item.response for item in source.items.select_related("response")]
    AssignmentItem.objects.bulk_create(
        assignment_items_shuffled(assignment=target, responses=responses, seed=target.seed)
    )


@transaction.atomic
def assignment_reassign(*, assignment: Assignment, rater: Rater) -> Assignment:
    """Move work nobody has started to another clinician. Started work is never moved silently:
    it raises ValueError (use `assignment_reclaim` once it is stale)."""
    assignment = Assignment.objects.select_for_update().get(pk=assignment.pk)
    _check_movable(assignment)
    if assignment.status != Assignment.Status.PENDING or (
        assignment.ratings.exists() or assignment.label_annotations.exists()
    ):
        raise ValueError("this assignment was started; reclaim it instead once it is stale")
    if rater.kind != Rater.Kind.CLINICIAN:
        raise ValueError("only clinicians can be assigned conversations")
    if Assignment.objects.filter(rater=rater, conversation=assignment.conversation_id).exists():
        raise ValueError(f"{rater} already has this conversation")
    assignment.rater = rater
    assignment.save(update_fields=["rater"])
    rater_codes_assign(study_id=assignment.conversation.study_id, rater_ids=[rater.pk])
    if rater.user_id is not None:
        members_ensure(
            study_id=assignment.conversation.study_id,
            user_ids=[rater.user_id],
            role=MEMBER_CLINICIAN,
        )
    return assignment


def _check_movable(assignment: Assignment) -> None:
    # A practice conversation trains its clinician and a repeat compares a clinician with
    # themselves: given to anyone else, neither would mean anything.
    if assignment.kind != Assignment.Kind.RATING:
        raise ValueError("practice and repeat conversations stay with their clinician")
    if assignment.part:
        # It shows the clinician's own earlier scores beside the added responses.
        raise ValueError("added responses stay with the clinician who rated the conversation")


@transaction.atomic
def assignment_reclaim(*, assignment: Assignment, rater: Rater) -> Assignment:
    """Hand a stale assignment to another clinician. The first clinician's partial ratings stay
    (as drafts on the old, now reclaimed assignment); the new one gets a fresh order."""
    assignment = (
        Assignment.objects.select_for_update()
        .select_related("conversation__study")
        .get(pk=assignment.pk)
    )
    _check_movable(assignment)
    if not assignment.is_stale:
        days = assignment.conversation.study.stale_after_days
        raise ValueError(f"only work untouched for more than {days} days can be reclaimed")
    if rater.pk == assignment.rater_id or rater.kind != Rater.Kind.CLINICIAN:
        raise ValueError("choose another clinician")
    if Assignment.objects.filter(rater=rater, conversation=assignment.conversation_id).exists():
        raise ValueError(f"{rater} already has this conversation")
    assignment.status = Assignment.Status.RECLAIMED
    assignment.save(update_fields=["status"])
    new = Assignment.objects.create(
        rater=rater, conversation=assignment.conversation, reclaimed_from=assignment
    )
    rater_codes_assign(study_id=assignment.conversation.study_id, rater_ids=[rater.pk])
    if rater.user_id is not None:
        members_ensure(
            study_id=assignment.conversation.study_id,
            user_ids=[rater.user_id],
            role=MEMBER_CLINICIAN,
        )
    _items_copy(source=assignment, target=new)
    return new


def assignment_lock_open(*, assignment: Assignment) -> Assignment:
    """Lock the assignment row: every write to one assignment runs one at a time (two tabs)."""
    # The study comes in the same query (it is not locked: of=self) for the rubric checks below.
    locked = (
        Assignment.objects.select_for_update(of=("self",))
        .select_related("conversation__study")
        .get(pk=assignment.pk)
    )
    if locked.status not in OPEN:
        raise AssignmentLocked(f"this conversation is {locked.get_status_display().lower()}")
    # A consent not (yet, or no longer) given: a tab opened before a new version or before a
    # withdrawal saves nothing either.
    refusal = consent_refusal(study_id=locked.conversation.study_id, rater=locked.rater_id)
    if refusal:
        raise AssignmentLocked(refusal)
    return locked


def assignment_touch(*, assignment: Assignment, now) -> None:
    """Record activity. Active time grows by the gap since the previous activity (a save or a
    heartbeat), capped, so time away from the page is not counted."""
    fields = ["last_activity_at", "active_seconds"]
    previous = assignment.last_activity_at
    gap = (now - previous).total_seconds() if previous else None
    if gap is not None and 0 <= gap <= HEARTBEAT_MAX_SECONDS:
        # Whole seconds only; the remainder is carried (the clock advances by what was counted),
        # so frequent saves a fraction of a second apart still add up.
        assignment.active_seconds += int(gap)
        assert previous is not None  # gap is only measured from a previous activity
        assignment.last_activity_at = previous + timedelta(seconds=int(gap))
    else:
        assignment.active_seconds += HEARTBEAT_MAX_SECONDS if gap else 0
        assignment.last_activity_at = now
    if assignment.status == Assignment.Status.PENDING:
        assignment.status = Assignment.Status.IN_PROGRESS
        assignment.started_at = now
        fields += ["status", "started_at"]
    assignment.save(update_fields=fields)


def form_row_get_or_create(
    *, model: type[Rating] | type[LabelAnnotation], assignment: Assignment, **target
):
    """The clinician's own row (a Rating or LabelAnnotation) for `target`, a draft if new."""
    row, _ = model.objects.get_or_create(
        rater_id=assignment.rater_id,
        run=None,
        repeat=assignment.rating_repeat,
        defaults={
            "assignment": assignment,
            "status": model.Status.DRAFT,
            "source": model.Source.FORM,
        },
        **target,
    )
    return row


def assignment_mark_submitted(*, assignment: Assignment, now) -> Assignment:
    """Mark the locked assignment submitted at `now` (the caller checked it is complete)."""
    assignment.status = Assignment.Status.SUBMITTED
    assignment.submitted_at = assignment.last_activity_at = now
    assignment.save(update_fields=["status", "submitted_at", "last_activity_at"])
    submitted_emit(assignment=assignment)
    return assignment


def submitted_emit(*, assignment: Assignment) -> None:
    """Tell the webhooks that hear it that a task was submitted and, when it was the study's
    last open task, that the study reached its target. Ids only: no clinician's name. The
    study's row is locked for the last-task check, so two last submits at once report the
    target once."""
    if not webhooks_any():
        return
    study_id = Conversation.objects.filter(pk=assignment.conversation_id).values_list(
        "study_id", flat=True
    )[0]
    data = {
        "study": study_id,
        "assignment": assignment.pk,
        "conversation": assignment.conversation_id,
        "rater": assignment.rater_id,
        "kind": assignment.kind,
    }
    webhook_emit(event=Webhook.Event.ASSIGNMENT_SUBMITTED, study_id=study_id, data=data)
    Study.objects.select_for_update().filter(pk=study_id).first()
    tasks = Assignment.objects.filter(conversation__study_id=study_id)
    if not tasks.filter(status__in=OPEN).exists():
        webhook_emit(
            event=Webhook.Event.STUDY_TARGET_REACHED,
            study_id=study_id,
            data={"study": study_id, "submitted": tasks.filter(status="submitted").count()},
        )


def edit_clock_ms(*, edited_ms: int | None, now) -> int:
    """The edit's clock in ms: the browser's edit time, but never more than CLOCK_SKEW_MS ahead
    of the server's (a fast browser clock cannot win every later edit); the server's when none
    was sent."""
    server_ms = int(now.timestamp() * 1000)
    return server_ms if edited_ms is None else min(edited_ms, server_ms + CLOCK_SKEW_MS)


@transaction.atomic
def rating_save(
    *,
    assignment: Assignment,
    item_token: str,
    user: User,
    attribute_id: int | None = None,
    score: int | None = None,
    rationale: str | None = None,
    edited_ms: int | None = None,
) -> SaveResult:
    """Autosave one field: a score (attribute_id + score) or the rationale.

    Last edit wins per field, by the browser's edit clock `edited_ms`: a save older than what is
    stored (a stale tab, a retried request) changes nothing and reports the stored value. Every
    change is audited in RatingChange. Safe to retry: the same save twice stores one value once.
    """
    now = timezone.now()
    clock = edit_clock_ms(edited_ms=edited_ms, now=now)
    assignment = assignment_lock_open(assignment=assignment)
    item = (
        AssignmentItem.objects.filter(assignment=assignment, token=item_token)
        .order_by()  # the model's default ordering would join the assignment table
        .values_list("response_id", "earlier")
        .first()
    )
    if item is None:
        raise ValueError("unknown response")
    response_id, earlier = item
    if earlier:
        raise AssignmentLocked(
            "this response was rated and submitted before; it is shown read-only"
        )
    rating = form_row_get_or_create(model=Rating, assignment=assignment, response_id=response_id)
    assignment_touch(assignment=assignment, now=now)
    if attribute_id is not None:
        # One query checks both that the attribute is in this study's rubric and the score is on
        # its scale; the error path may take a second one to say which.
        rubric_id = assignment.conversation.study.rubric_id
        # A missing score is on no scale (the query would look for a NULL level, find none).
        on_scale = (
            score is not None
            and AttributeLevel.objects.filter(
                attribute_id=attribute_id, value=score, attribute__rubric_id=rubric_id
            ).exists()
        )
        if score is None or not on_scale:
            attribute = Attribute.objects.filter(pk=attribute_id, rubric_id=rubric_id).first()
            if attribute is None:
                raise ValueError("unknown attribute")
            raise ValueError(f"{attribute.name} takes a score from its scale, not {score!r}")
        current = Score.objects.filter(rating=rating, attribute_id=attribute_id).first()
        if current and current.edited_ms is not None and current.edited_ms > clock:
            return SaveResult(saved=False, value=current.value)
        if current is None:
            Score.objects.create(
                rating=rating, attribute_id=attribute_id, value=score, edited_ms=clock
            )
            old = ""
        else:
            old = str(current.value)
            current.value, current.edited_ms = score, clock
            current.save(update_fields=["value", "edited_ms"])
        if old != str(score):
            RatingChange.objects.create(
                rating=rating,
                attribute_id=attribute_id,
                field="score",
                old_value=old,
                new_value=str(score),
                changed_by=user,
            )
        return SaveResult(saved=True, value=score)
    if rationale is None:
        raise ValueError("nothing to save")
    if rating.rationale_edited_ms is not None and rating.rationale_edited_ms > clock:
        return SaveResult(saved=False, value=rating.rationale)
    rationale = rationale.strip()[:2000]
    old = rating.rationale
    rating.rationale, rating.rationale_edited_ms = rationale, clock
    rating.save(update_fields=["rationale", "rationale_edited_ms", "updated_at"])
    if old != rationale:
        RatingChange.objects.create(
            rating=rating, field="rationale", old_value=old, new_value=rationale, changed_by=user
        )
    return SaveResult(saved=True, value=rationale)


def _rationale_too_short(text: str, *, minimum: int) -> bool:
    return len(text.strip()) < max(minimum, 1)


def _rationale_rule(*, minimum: int) -> str:
    return f"rationale (at least {minimum} characters)" if minimum > 1 else "rationale"


@transaction.atomic
def assignment_submit(*, assignment: Assignment, user: User) -> Assignment:
    """Lock a conversation once every response has every attribute scored; its ratings become
    `complete` (the only ones analysis uses). Raises AssignmentIncomplete naming what is missing."""
    assignment = assignment_lock_open(assignment=assignment)
    attributes = list(
        Attribute.objects.filter(rubric__studies__conversations=assignment.conversation_id)
    )
    # Responses rated in an earlier part are shown for comparison; their ratings stay as they were.
    items = list(assignment.items.filter(earlier=False).order_by("position"))
    ratings = {
        r.response_id: r
        for r in Rating.objects.filter(
            rater_id=assignment.rater_id,
            response_id__in=[i.response_id for i in items],
            run=None,
            repeat=assignment.rating_repeat,
        )
    }
    scored = set(
        Score.objects.filter(rating__in=ratings.values()).values_list(
            "rating__response_id", "attribute_id"
        )
    )
    study = assignment.conversation.study
    missing = []
    for item in items:
        names = [a.name for a in attributes if (item.response_id, a.pk) not in scored]
        rating = ratings.get(item.response_id)
        if study.rationale_required and _rationale_too_short(
            rating.rationale if rating else "", minimum=study.rationale_min_length
        ):
            names.append(_rationale_rule(minimum=study.rationale_min_length))
        if names:
            missing.append((item.label, names))
    if missing:
        raise AssignmentIncomplete(missing)
    now = timezone.now()
    Rating.objects.filter(pk__in=[r.pk for r in ratings.values()]).update(
        status=Rating.Status.COMPLETE, assignment=assignment, updated_at=now
    )
    RatingChange.objects.bulk_create(
        RatingChange(
            rating=r, field="status", old_value=r.status, new_value="complete", changed_by=user
        )
        for r in ratings.values()
    )
    return assignment_mark_submitted(assignment=assignment, now=now)


@transaction.atomic
def assignment_flag(*, assignment: Assignment, reason: str) -> Assignment:
    """Set a conversation aside instead of rating it (distressing or broken content). Ratings
    already typed stay as drafts, which analysis ignores."""
    reason = reason.strip()
    if not reason:
        raise ValueError("say why you flag this conversation")
    assignment = assignment_lock_open(assignment=assignment)
    assignment.status = Assignment.Status.FLAGGED
    assignment.flag_reason = reason[:2000]
    assignment.last_activity_at = timezone.now()
    assignment.save(update_fields=["status", "flag_reason", "last_activity_at"])
    return assignment


def assignment_heartbeat(*, assignment: Assignment) -> None:
    """Count active time: the page calls this every 15 s, only while it is visible and was used
    in the last minute; see `assignment_touch`."""
    now = timezone.now()
    with transaction.atomic():
        try:
            assignment = assignment_lock_open(assignment=assignment)
        except AssignmentLocked:
            return
        assignment_touch(assignment=assignment, now=now)


@transaction.atomic
def clinician_create(*, username: str, email: str = "") -> tuple:
    """An admin-created clinician account without a usable password (the invite link sets it),
    with its role (accounts.users.user_create) and its Rater."""
    user = user_create(username=username, email=email, role=CLINICIAN)
    username = user.get_username()
    if Rater.objects.filter(name__iexact=username).exists():
        # The account made above goes with the transaction.
        raise ValueError(f"a rater named {username!r} exists already")
    rater = Rater.objects.create(kind=Rater.Kind.CLINICIAN, name=username, user=user)
    return user, rater


@transaction.atomic
def clinician_invite(*, username: str, email: str = "", study: Study | None = None, site: str = ""):
    """Invite a clinician: the account (clinician_create), its membership of ``study`` at
    ``site`` when a study is named, and the invitation e-mailed by the upkeep worker once all of
    it is committed (when an address is given). The Manage page's invite and a lead's team page
    both come here, so an invitee made from a study is on its team at once. Returns the user."""
    user, _ = clinician_create(username=username, email=email)
    if study is not None:
        member_add(study=study, user=user, role=MEMBER_CLINICIAN, site=site)
    if user.email:
        from annotation.tasks import invitation_mail_send  # the tasks module imports services

        study_id = study.pk if study is not None else None
        transaction.on_commit(lambda: invitation_mail_send.delay(user.pk, study_id))
    return user
