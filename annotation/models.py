"""Studies, rubrics, conversations, responses and ratings.

Human clinicians and LLM judges are both `Rater`s, so every analysis treats them the same way.
A `Rating` is one rater's judgement of one response in one run (and repeat); its `Score`s are one
row per rubric attribute, so a study may use any rubric. What must never happen is enforced by
the database: a second rating for the same rater/response/run/repeat (unique constraint) and a
score that is not a level of its attribute's scale (composite foreign key to `AttributeLevel`,
added in migration 0002 on PostgreSQL).
"""

import secrets
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from mentalbench.fields import EncryptedTextField


def new_token() -> str:
    # Opaque, random tokens are what clinicians see in URLs and forms: they follow no insertion
    # order and carry nothing about the responder (docs/rating.md, "How it is stored").
    return secrets.token_urlsafe(12)


def new_seed() -> int:
    return secrets.randbits(63)


class Rubric(models.Model):
    name = models.CharField(max_length=200, unique=True)
    scale_min = models.PositiveSmallIntegerField(default=1)
    scale_max = models.PositiveSmallIntegerField(default=5)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(scale_min__lt=models.F("scale_max")), name="rubric_scale_ordered"
            )
        ]

    def __str__(self) -> str:
        return self.name


class Attribute(models.Model):
    class Group(models.TextChoices):
        CSS = "CSS", "Cognitive Support Score"
        ARS = "ARS", "Affective Resonance Score"
        OTHER = "OTHER", "Other"

    rubric = models.ForeignKey(Rubric, on_delete=models.CASCADE, related_name="attributes")
    name = models.CharField(max_length=64)
    group = models.CharField(max_length=8, choices=Group.choices)
    description = models.TextField(blank=True)
    position = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["rubric", "position"]
        constraints = [
            models.UniqueConstraint(fields=["rubric", "name"], name="attribute_unique_name"),
            models.UniqueConstraint(
                fields=["rubric", "position"], name="attribute_unique_position"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class AttributeLevel(models.Model):
    """One point of an attribute's scale with its anchor text; scores must reference one."""

    attribute = models.ForeignKey(Attribute, on_delete=models.CASCADE, related_name="levels")
    value = models.SmallIntegerField()
    anchor = models.CharField(max_length=300)

    class Meta:
        ordering = ["attribute", "-value"]
        constraints = [
            models.UniqueConstraint(fields=["attribute", "value"], name="level_unique_value")
        ]

    def __str__(self) -> str:
        return f"{self.attribute.name} {self.value}: {self.anchor}"


class Study(models.Model):
    class Kind(models.TextChoices):
        RESPONSE_RATING = "rating", "Response rating"
        DISTORTION_LABELLING = "distortion", "Cognitive-distortion labelling"

    class LabelScheme(models.TextChoices):
        RANKED = "ranked", "Ranked: one dominant label, an optional secondary one"
        MULTI = "multi", "Multi-label: any number of labels"

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.RESPONSE_RATING)
    # Distortion studies only: how clinicians and LLM runs label (the paper's RLP or MLP).
    label_scheme = models.CharField(
        max_length=8, choices=LabelScheme.choices, default=LabelScheme.RANKED
    )
    rubric = models.ForeignKey(Rubric, on_delete=models.PROTECT, related_name="studies")
    description = models.TextField(blank=True)
    # An assignment untouched this long may be reclaimed by an admin for another clinician.
    stale_after_days = models.PositiveSmallIntegerField(default=7)
    # Whether a response's rationale must be written before the conversation can be submitted,
    # and how long it must be then (autosave keeps any draft; only submitting checks).
    rationale_required = models.BooleanField(default=False)
    rationale_min_length = models.PositiveSmallIntegerField(
        default=0, help_text="characters, counted after trimming; applies when required"
    )

    class TextPolicy(models.TextChoices):
        ANY = "any", "Any endpoint the admins configured"
        LOCAL_ONLY = "local", "Local models only (servers the study team runs)"

    # A clinician with open work and no progress for this many days gets one e-mail reminder
    # (annotation.services.mail); 0: never.
    remind_after_days = models.PositiveSmallIntegerField(
        default=3,
        verbose_name="remind after (days)",
        help_text="E-mail a clinician whose assigned work has not moved for this many days "
        "(once per pause); 0: never.",
    )
    # Where the study's conversations and responses may be sent, as its ethics approval or
    # data-sharing agreement says: the judging app refuses a run that would send them
    # elsewhere, before anything is sent.
    text_policy = models.CharField(
        max_length=8,
        choices=TextPolicy.choices,
        default=TextPolicy.ANY,
        verbose_name="where texts may go",
        help_text="Local models only: runs go to endpoints marked 'on our own servers' "
        "(llama.cpp, vLLM), never to OpenAI or Anthropic.",
    )
    # The day the clinicians' work is due: the study page counts who is overdue after it, and
    # the e-mail reminders warn before it.
    deadline = models.DateField(
        null=True, blank=True, help_text="the day assigned work is due; empty: no deadline"
    )
    # Two clinicians' scores of one response on one attribute this far apart (points on the
    # rubric's scale) or further send the pair to adjudication (docs/adjudication.md).
    adjudication_threshold = models.PositiveSmallIntegerField(
        default=2,
        validators=[MinValueValidator(1)],
        help_text="Scores this many points apart or more go to an adjudicator; "
        "closer ones stand as the clinicians' consensus.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "studies"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class StudyMember(models.Model):
    """A person's role in one study, and where they work (docs/membership.md).

    What a person may see of a study follows from these rows: a study with no row for them
    (and no platform-wide role) is not shown to them at all, not even its name. One person may
    hold several roles in a study (a lead who also rates) and different roles in different
    studies.
    """

    class Role(models.TextChoices):
        LEAD = "lead", "lead (manages the study)"
        CLINICIAN = "clinician", "clinician (rates)"
        RESEARCHER = "researcher", "researcher (reads results)"
        ADJUDICATOR = "adjudicator", "adjudicator (settles disagreements)"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="members")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="study_memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    site = models.CharField(
        max_length=200, blank=True, help_text="hospital or site, for progress per site"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["study", "role", "user"]
        constraints = [
            models.UniqueConstraint(
                fields=["study", "user", "role"], name="study_member_once_per_role"
            )
        ]
        indexes = [models.Index(fields=["user", "role"], name="study_member_user_role")]

    def __str__(self) -> str:
        return f"{self.user} — {self.role} in {self.study}"


class Conversation(models.Model):
    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="conversations")
    external_id = models.CharField(max_length=200)
    context = models.TextField()
    # Up to three condition labels (MentalBench-100k assigns up to 3 of 23 conditions).
    conditions = models.JSONField(default=list, blank=True)
    source = models.CharField(max_length=100, blank=True, help_text="source dataset")
    # A practice conversation trains clinicians against reference scores: it is never assigned
    # as real work, never judged, and its ratings never enter an analysis or an export.
    practice = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["study", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["study", "external_id"], name="conversation_unique_external_id"
            )
        ]

    def __str__(self) -> str:
        return f"{self.study} #{self.external_id}"


class ClinicianSample(models.Model):
    """The conversations a study sends to clinicians, drawn inside the platform with a recorded
    seed: the design that judge-assisted estimates use by default (docs/judge-assisted.md).

    "Whatever clinicians happened to rate" is not a design: a judge-assisted interval is valid
    for the mean over the study when the rated conversations are a random sample of it. The
    latest sample of a study is its design; earlier ones are kept for the record.
    """

    class Method(models.TextChoices):
        UNIFORM = "uniform", "uniform random conversations"
        STRATIFIED = "stratified", "stratified by first condition, proportional allocation"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="clinician_samples")
    method = models.CharField(max_length=16, choices=Method.choices)
    size = models.PositiveIntegerField()
    population = models.PositiveIntegerField(help_text="conversations the sample was drawn from")
    seed = models.BigIntegerField()
    conversations = models.ManyToManyField(Conversation, related_name="clinician_samples")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["study", "-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.study}: {self.describe()}"

    def describe(self) -> str:
        return (
            f"clinician sample #{self.pk}: {self.size} of {self.population} conversations, "
            f"{self.get_method_display()}, seed {self.seed}"
        )


class Responder(models.Model):
    """Who wrote a response: the dataset's human reference or a model."""

    key = models.CharField(max_length=100, unique=True, help_text="column key, e.g. gpt4o")
    name = models.CharField(max_length=200)
    # Used for self-preference exclusion: a judge does not rate its own family's responses.
    family = models.CharField(max_length=100)
    is_reference = models.BooleanField(default=False, help_text="human-written reference")

    class Meta:
        ordering = ["key"]

    def __str__(self) -> str:
        return self.name


class Response(models.Model):
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="responses"
    )
    responder = models.ForeignKey(Responder, on_delete=models.PROTECT, related_name="responses")
    # Blank where a release ships ratings without texts (MentalAlign-70k).
    text = models.TextField(blank=True)
    truncated = models.BooleanField(default=False, help_text="cut off by the token limit")
    # Generation metadata: tokens, latency, finish reason, a reasoning model's thinking, run id.
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation", "responder"]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "responder"], name="response_unique_responder"
            )
        ]

    def __str__(self) -> str:
        return f"{self.conversation} / {self.responder.key}"


class Rater(models.Model):
    class Kind(models.TextChoices):
        CLINICIAN = "clinician", "Clinician"
        JUDGE = "judge", "LLM judge"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    name = models.CharField(max_length=200, unique=True)
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="rater",
    )
    model = models.CharField(max_length=200, blank=True, help_text="judge model id")
    family = models.CharField(max_length=100, blank=True, help_text="judge model family")
    # Responder keys this judge must not be scored on (self-preference exclusion).
    excluded_responders = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["kind", "name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind="clinician") | Q(user__isnull=True),
                name="rater_judge_has_no_user",
            )
        ]

    def __str__(self) -> str:
        return self.name


class RaterCode(models.Model):
    """A clinician's pseudonymous code in one study (C01, C02, …), shown to researchers instead
    of the clinician's name.

    Stored rather than derived so it is stable across exports, the API and the dashboards (and
    through a SECRET_KEY rotation), joinable in SQL, and different between studies: C01 of one
    study is unrelated to C01 of another. A code is given when a clinician joins a study
    (annotation.rater_codes), so reading a study's data never writes; the clinicians
    who join together (one assignment round, one import) are numbered in a random order, and
    later ones take the next numbers. Only admins see this table.

    The table keeps the name it was created under (``analysis_ratercode``): the model moved
    from analysis, which only reads it now, without moving any row.
    """

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="+")
    rater = models.ForeignKey(Rater, on_delete=models.CASCADE, related_name="codes")
    number = models.PositiveIntegerField()
    code = models.CharField(max_length=16)

    class Meta:
        db_table = "analysis_ratercode"
        ordering = ["study", "number"]
        constraints = [
            models.UniqueConstraint(fields=["study", "rater"], name="rater_code_once_per_study"),
            models.UniqueConstraint(fields=["study", "number"], name="rater_code_unique_in_study"),
        ]

    def __str__(self) -> str:
        return self.code


class Assignment(models.Model):
    """One conversation for one clinician, with its stored presentation order (AssignmentItem)."""

    class Status(models.TextChoices):
        PENDING = "pending", "Not started"
        IN_PROGRESS = "in_progress", "In progress"
        SUBMITTED = "submitted", "Submitted"
        FLAGGED = "flagged", "Flagged"
        RECLAIMED = "reclaimed", "Reclaimed"

    #: The statuses of work still to do: saves are accepted, reminders and withdrawal apply.
    OPEN_STATUSES = (Status.PENDING, Status.IN_PROGRESS)

    class Kind(models.TextChoices):
        RATING = "rating", "Rating"
        PRACTICE = "practice", "Practice (training)"
        # A conversation the clinician rated before, shown again unmarked (test-retest).
        RETEST = "retest", "Repeat (test-retest)"

    rater = models.ForeignKey(Rater, on_delete=models.PROTECT, related_name="assignments")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.RATING)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.PROTECT, related_name="assignments"
    )
    token = models.CharField(max_length=32, unique=True, default=new_token)
    # The permutation is drawn once from this recorded seed and stored in AssignmentItem.position.
    seed = models.BigIntegerField(default=new_seed)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    # 0: the conversation as first assigned. Responses added after the clinician started it come
    # as a task of their own, part 1, 2, …, so that submitted work stays submitted (top-up).
    part = models.PositiveSmallIntegerField(default=0)
    flag_reason = models.TextField(blank=True)
    active_seconds = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    last_activity_at = models.DateTimeField(null=True, blank=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    reclaimed_from = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="reclaimed_by"
    )

    class Meta:
        ordering = ["rater", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["rater", "conversation", "kind", "part"],
                name="assignment_unique_rater_conversation_kind_part",
            )
        ]
        indexes = [models.Index(fields=["rater", "status"])]

    def __str__(self) -> str:
        return f"{self.rater} → {self.conversation}"

    @property
    def rating_repeat(self) -> int:
        """`Rating.repeat` of this assignment's ratings: a repeat is stored beside the first
        rating (repeat 1), never over it."""
        return 1 if self.kind == self.Kind.RETEST else 0

    @property
    def is_open(self) -> bool:
        return self.status in (self.Status.PENDING, self.Status.IN_PROGRESS)

    @property
    def is_stale(self) -> bool:
        """Open and untouched for longer than the study allows (reads conversation.study)."""
        return self.is_stale_at(timezone.now())

    def is_stale_at(self, now: datetime) -> bool:
        touched = self.last_activity_at or self.created_at
        limit = timedelta(days=self.conversation.study.stale_after_days)
        return self.is_open and now - touched > limit


class AssignmentItem(models.Model):
    """A response as one clinician sees it: a position ("Response A") and an opaque token."""

    assignment = models.ForeignKey(Assignment, on_delete=models.CASCADE, related_name="items")
    response = models.ForeignKey(Response, on_delete=models.PROTECT, related_name="+")
    position = models.PositiveSmallIntegerField()
    token = models.CharField(max_length=32, unique=True, default=new_token)
    # A response the clinician rated in an earlier part of the same conversation: shown among the
    # new ones with its scores, read-only, so the new ones sit at random places among all.
    earlier = models.BooleanField(default=False)

    class Meta:
        ordering = ["assignment", "position"]
        constraints = [
            models.UniqueConstraint(fields=["assignment", "position"], name="item_unique_position"),
            models.UniqueConstraint(fields=["assignment", "response"], name="item_unique_response"),
        ]

    def __str__(self) -> str:
        return f"Response {self.label}"

    @property
    def label(self) -> str:
        return chr(ord("A") + self.position) if self.position < 26 else f"#{self.position + 1}"


class Rating(models.Model):
    class Status(models.TextChoices):
        DRAFT = "draft", "Draft (clinician still editing)"
        COMPLETE = "complete", "Complete"
        INVALID = "invalid", "Invalid (unparseable LLM output; raw text kept, no scores)"

    class Source(models.TextChoices):
        FORM = "form", "Rating form"
        IMPORT = "import", "Imported file"
        JUDGE = "judge", "Judge run"

    rater = models.ForeignKey(Rater, on_delete=models.PROTECT, related_name="ratings")
    response = models.ForeignKey(Response, on_delete=models.CASCADE, related_name="ratings")
    run = models.ForeignKey(
        "judging.Run", on_delete=models.PROTECT, null=True, blank=True, related_name="ratings"
    )
    repeat = models.PositiveSmallIntegerField(default=0)
    assignment = models.ForeignKey(
        Assignment, on_delete=models.SET_NULL, null=True, blank=True, related_name="ratings"
    )
    status = models.CharField(max_length=16, choices=Status.choices)
    source = models.CharField(max_length=16, choices=Source.choices)
    rationale = models.TextField(blank=True)
    overall = models.FloatField(null=True, blank=True, help_text="a judge's own Overall score")
    raw_output = models.TextField(blank=True, help_text="exact LLM output or imported cell")
    error = models.TextField(blank=True, help_text="why the output was not usable")
    # When the rationale was last edited, by the editing browser's clock (ms since the epoch), so
    # that a stale tab's late save cannot overwrite a newer edit from another tab.
    rationale_edited_ms = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # NULLS NOT DISTINCT (PostgreSQL 15+): ratings outside any run are unique as well.
            models.UniqueConstraint(
                fields=["rater", "response", "run", "repeat"],
                name="rating_unique_rater_response_run_repeat",
                nulls_distinct=False,
            )
        ]
        indexes = [models.Index(fields=["rater", "status"])]

    def __str__(self) -> str:
        return f"{self.rater} on {self.response_id} ({self.status})"


class Score(models.Model):
    rating = models.ForeignKey(Rating, on_delete=models.CASCADE, related_name="scores")
    attribute = models.ForeignKey(Attribute, on_delete=models.PROTECT, related_name="+")
    value = models.SmallIntegerField()
    # Rating form only: when this score was chosen (browser clock, ms; see rationale_edited_ms).
    edited_ms = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["rating", "attribute"], name="score_unique_attribute")
        ]

    def __str__(self) -> str:
        return f"{self.attribute_id}={self.value}"


class RatingChange(models.Model):
    """Audit trail: every change to a score or rationale, who made it and when (old → new)."""

    rating = models.ForeignKey(Rating, on_delete=models.CASCADE, related_name="changes")
    attribute = models.ForeignKey(
        Attribute, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    field = models.CharField(max_length=32)  # "score", "rationale", "status"
    old_value = models.TextField(blank=True)
    new_value = models.TextField(blank=True)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    changed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["changed_at", "id"]

    def __str__(self) -> str:
        return f"{self.field}: {self.old_value!r} → {self.new_value!r}"


class DistortionLabel(models.Model):
    """One label of a distortion study's label set, with the definition shown to clinicians."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="distortion_labels")
    name = models.CharField(max_length=100)
    # How the label is written in the prompt, where it differs from `name` (Appendix D).
    prompt_label = models.CharField(max_length=100, blank=True)
    definition = models.TextField(blank=True)
    example = models.TextField(blank=True)
    position = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["study", "position"]
        constraints = [
            models.UniqueConstraint(fields=["study", "name"], name="distortionlabel_unique_name"),
            models.UniqueConstraint(
                fields=["study", "position"], name="distortionlabel_unique_position"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class LabelAnnotation(models.Model):
    """One rater's labels for one conversation's user message, in one run and repeat.

    The twin of `Rating` for distortion studies: clinicians (run None, repeat 0) and LLM runs
    (run, repeat 0..N-1) are stored alike. `labels` holds canonical names in order (dominant
    first for the ranked scheme), "Others" standing for every out-of-list label, which is kept
    verbatim in `others`.
    """

    Status = Rating.Status
    Source = Rating.Source

    rater = models.ForeignKey(Rater, on_delete=models.PROTECT, related_name="label_annotations")
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="label_annotations"
    )
    run = models.ForeignKey(
        "judging.Run",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="label_annotations",
    )
    repeat = models.PositiveSmallIntegerField(default=0)
    assignment = models.ForeignKey(
        Assignment,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="label_annotations",
    )
    status = models.CharField(max_length=16, choices=Rating.Status.choices)
    source = models.CharField(max_length=16, choices=Rating.Source.choices)
    labels = models.JSONField(default=list, blank=True)
    others = models.JSONField(default=list, blank=True)
    raw_output = models.TextField(blank=True)
    error = models.TextField(blank=True)
    # Browser edit clock of the latest saved selection (see Rating.rationale_edited_ms).
    edited_ms = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["rater", "conversation", "run", "repeat"],
                name="labelannotation_unique_rater_conversation_run_repeat",
                nulls_distinct=False,
            )
        ]
        indexes = [models.Index(fields=["run", "status"])]

    def __str__(self) -> str:
        return f"{self.rater} on {self.conversation_id}: {self.labels} ({self.status})"


class LabelChange(models.Model):
    """Audit trail of a clinician's label selection (the twin of RatingChange: old → new)."""

    annotation = models.ForeignKey(
        LabelAnnotation, on_delete=models.CASCADE, related_name="changes"
    )
    field = models.CharField(max_length=32)  # "labels", "status"
    old_value = models.TextField(blank=True)
    new_value = models.TextField(blank=True)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    changed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["changed_at", "id"]

    def __str__(self) -> str:
        return f"{self.field}: {self.old_value!r} → {self.new_value!r}"


class ImportLog(models.Model):
    """What an import stored and, cell by cell, what it could not use and why."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="imports")
    kind = models.CharField(max_length=32)  # "conversations", "mentalalign"
    file_name = models.CharField(max_length=500)
    sha256 = models.CharField(max_length=64)
    summary = models.JSONField(default=dict)
    problems = models.JSONField(default=list, help_text="[{file, row, column, reason}]")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.kind} import of {self.file_name}"


class CalibrationSettings(models.Model):
    """A study's training pass rule and test-retest plan (defaults where a study has none)."""

    study = models.OneToOneField(Study, on_delete=models.CASCADE, related_name="calibration")
    # Training passes when the mean absolute difference from the reference is at most this …
    pass_mean_abs_diff = models.FloatField(default=0.75)
    # … and no single score is this far or further from its reference.
    pass_max_diff = models.PositiveSmallIntegerField(default=2)
    # How many of each clinician's rated conversations reappear (0: no repeats) …
    retest_count = models.PositiveSmallIntegerField(default=0)
    # … each after at least this many other conversations were submitted in between.
    retest_gap = models.PositiveSmallIntegerField(default=3)

    class Meta:
        verbose_name_plural = "calibration settings"
        constraints = [
            models.CheckConstraint(
                condition=Q(pass_mean_abs_diff__gte=0), name="calibration_mad_not_negative"
            ),
            models.CheckConstraint(condition=Q(retest_gap__gte=1), name="calibration_gap_positive"),
        ]

    def __str__(self) -> str:
        return f"calibration of {self.study}"


class ReferenceScore(models.Model):
    """The expected score of one practice response on one attribute (an expert panel's)."""

    response = models.ForeignKey(Response, on_delete=models.CASCADE, related_name="references")
    attribute = models.ForeignKey(Attribute, on_delete=models.PROTECT, related_name="+")
    value = models.SmallIntegerField()
    set_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    set_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["response", "attribute"], name="reference_unique_attribute"
            )
        ]

    def __str__(self) -> str:
        return f"reference {self.response_id}/{self.attribute_id}={self.value}"


class TrainingOutcome(models.Model):
    """A clinician's training result in a study, recorded when their last practice conversation
    is submitted; an admin may let a clinician through by hand (`decided_by`)."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="training_outcomes")
    rater = models.ForeignKey(Rater, on_delete=models.CASCADE, related_name="training_outcomes")
    passed = models.BooleanField()
    mean_abs_diff = models.FloatField(null=True, blank=True)
    max_diff = models.SmallIntegerField(null=True, blank=True)
    scores = models.PositiveIntegerField(default=0, help_text="scores compared")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["study", "rater"], name="training_unique_rater")
        ]

    def __str__(self) -> str:
        return f"{self.rater} in {self.study}: {'passed' if self.passed else 'not passed'}"


class AssignmentChange(models.Model):
    """Audit trail of changes an admin makes to an assignment itself (responses added, …)."""

    assignment = models.ForeignKey(Assignment, on_delete=models.CASCADE, related_name="changes")
    field = models.CharField(max_length=32)  # "items", "status"
    old_value = models.TextField(blank=True)
    new_value = models.TextField(blank=True)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    changed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["changed_at", "id"]

    def __str__(self) -> str:
        return f"{self.field}: {self.old_value!r} → {self.new_value!r}"


class MailPreference(models.Model):
    """A person's answer to the unsubscribe link: from `unsubscribed_at` on, the platform sends
    them no e-mail it decides to send (invitations, reminders, digests). A password link they
    ask for themselves is still sent."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mail_preference"
    )
    unsubscribed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.user}: {'unsubscribed' if self.unsubscribed_at else 'subscribed'}"


class MailSent(models.Model):
    """Each e-mail the platform sent of its own accord, once: (user, kind, key) is unique, so a
    reminder for one pause in someone's work (one deadline of a study, one week's digest) is sent
    once however often the check runs."""

    class Kind(models.TextChoices):
        INVITATION = "invitation", "Invitation"
        REMINDER = "reminder", "Reminder"
        DEADLINE = "deadline", "Deadline reminder"
        DEADLINE_PASSED = "deadline_passed", "Deadline passed"
        DIGEST = "digest", "Weekly digest to a lead"
        ESCALATION = "escalation", "A response marked unsafe, to a lead"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mail_sent"
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    study = models.ForeignKey(
        Study, on_delete=models.CASCADE, null=True, blank=True, related_name="mail_sent"
    )
    key = models.CharField(max_length=100)
    subject = models.CharField(max_length=200)
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-sent_at", "-id"]
        verbose_name_plural = "mail sent"
        constraints = [
            models.UniqueConstraint(fields=["user", "kind", "key"], name="mail_sent_once")
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} to {self.user} at {self.sent_at:%Y-%m-%d %H:%M}"


class ConsentText(models.Model):
    """A version of a study's consent text, set by its lead. A study with any version requires
    the clinicians' consent to its latest one before their first rating (and again when a new
    version is published). What happens to a clinician's ratings on withdrawal is part of the
    text they agreed to."""

    class OnWithdrawal(models.TextChoices):
        KEEP = "keep", "Keep the ratings given so far (under the clinician's study code)"
        REMOVE = "remove", "Remove the clinician's ratings from the study"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="consent_texts")
    version = models.PositiveSmallIntegerField()
    text = models.TextField()
    on_withdrawal = models.CharField(
        max_length=8, choices=OnWithdrawal.choices, default=OnWithdrawal.KEEP
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["study", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["study", "version"], name="consent_text_version_once")
        ]

    def __str__(self) -> str:
        return f"{self.study} consent v{self.version}"


class ConsentRecord(models.Model):
    """A clinician's consent to one version of a study's consent text, and its withdrawal."""

    consent_text = models.ForeignKey(ConsentText, on_delete=models.PROTECT, related_name="records")
    rater = models.ForeignKey(Rater, on_delete=models.CASCADE, related_name="consents")
    accepted_at = models.DateTimeField(auto_now_add=True)
    withdrawn_at = models.DateTimeField(null=True, blank=True)
    ratings_removed = models.PositiveIntegerField(
        default=0, help_text="ratings removed on withdrawal, as the consent text said"
    )

    class Meta:
        ordering = ["-accepted_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["consent_text", "rater"], name="consent_once")
        ]

    def __str__(self) -> str:
        state = "withdrawn" if self.withdrawn_at else "given"
        return f"{self.rater} consent to {self.consent_text}: {state}"


class ClinicianCredentials(models.Model):
    """What a study reports about its raters, entered by the clinician or an admin. The release
    summarises it (counts by specialty and years in practice) without naming anyone."""

    rater = models.OneToOneField(Rater, on_delete=models.CASCADE, related_name="credentials")
    specialty = models.CharField(max_length=100, blank=True, help_text="e.g. psychiatry")
    years_in_practice = models.PositiveSmallIntegerField(null=True, blank=True)
    licence = models.CharField(max_length=200, blank=True, help_text="free text")
    conflicts_of_interest = models.TextField(blank=True, help_text="declared conflicts, if any")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "clinician credentials"

    def __str__(self) -> str:
        return f"credentials of {self.rater}"


class Webhook(models.Model):
    """A URL another system gave to hear what happened here (docs/webhooks.md). Each delivery is
    signed with the hook's own secret (HMAC-SHA256), which is shown once, when it is made."""

    class Event(models.TextChoices):
        RUN_FINISHED = "run.finished", "A run finished"
        RUN_FAILED = "run.failed", "A run failed"
        ASSIGNMENT_SUBMITTED = "assignment.submitted", "A clinician submitted a task"
        STUDY_TARGET_REACHED = (
            "study.target_reached",
            "A study's clinicians submitted every task they were given",
        )
        RELEASE_READY = "release.ready", "A release bundle is ready"
        ESCALATION_OPENED = "escalation.opened", "A clinician marked a response unsafe"

    url = models.URLField(max_length=500)
    events = models.JSONField(default=list, help_text="the Event values it hears")
    study = models.ForeignKey(
        Study, on_delete=models.CASCADE, null=True, blank=True, related_name="+",
        help_text="only this study's events (blank: every study's)",
    )  # fmt: skip
    # "fernet:<token>" (mentalbench.encryption); only the delivery decrypts it. A row written
    # before encryption, while no key was configured, may still hold the plaintext.
    secret = EncryptedTextField(editable=False)
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="+",
    )  # fmt: skip
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.url


class WebhookDelivery(models.Model):
    """One event for one hook: the outbox row, written in the transaction that made the event
    (so an event that is rolled back sends nothing and one that is committed is never lost), and
    the log of its attempts. Receivers tell repeats apart by its id."""

    class Status(models.TextChoices):
        PENDING = "pending", "Waiting to be sent"
        SENDING = "sending", "Being sent"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Given up"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=40)
    body = models.TextField(help_text="the JSON sent, exactly as signed")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    lease_until = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_response = models.TextField(blank=True, help_text="the start of the receiver's answer")
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="delivery_due")]

    def __str__(self) -> str:
        return f"{self.event} → {self.webhook_id} ({self.status})"


class Adjudication(models.Model):
    """An adjudicator's final score of one response on one attribute, where the clinicians
    disagreed by the study's threshold or more, or a clinician flagged the conversation
    (docs/adjudication.md). One per response and attribute: saving again updates it."""

    class Reason(models.TextChoices):
        AMBIGUOUS_RESPONSE = "ambiguous_response", "Ambiguous response"
        RUBRIC_GAP = "rubric_gap", "Rubric gap (the rubric does not cover the case)"
        RATER_ERROR = "rater_error", "Rater error"
        OTHER = "other", "Other"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="adjudications")
    response = models.ForeignKey(Response, on_delete=models.CASCADE, related_name="adjudications")
    attribute = models.ForeignKey(Attribute, on_delete=models.PROTECT, related_name="+")
    final_score = models.SmallIntegerField()
    # Blank while the adjudicator has picked a score but no reason yet (autosave keeps both).
    reason = models.CharField(max_length=32, choices=Reason.choices, blank=True)
    reason_text = models.TextField(blank=True)
    rubric_needs_change = models.BooleanField(default=False)
    adjudicator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["study", "response", "attribute"]
        constraints = [
            models.UniqueConstraint(
                fields=["response", "attribute"], name="adjudication_once_per_attribute"
            )
        ]

    def __str__(self) -> str:
        return f"adjudicated {self.response_id}/{self.attribute_id}={self.final_score}"


class Escalation(models.Model):
    """A clinician's mark that one response in their task is unsafe, with their reason
    (docs/adjudication.md, *Escalation*). It heads the study's adjudication queue and stays open
    until an adjudicator records a decision, unless the clinician withdraws it while their task
    is open. Rows are never deleted: a withdrawn or decided escalation stays for the record, and
    marking the response again opens a new one (at most one open per clinician and response)."""

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        WITHDRAWN = "withdrawn", "Withdrawn by the clinician"
        RESOLVED = "resolved", "Decided by an adjudicator"

    class Decision(models.TextChoices):
        CONFIRMED_UNSAFE = "confirmed_unsafe", "Confirmed unsafe"
        NOT_UNSAFE = "not_unsafe", "Not unsafe"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="escalations")
    response = models.ForeignKey(Response, on_delete=models.CASCADE, related_name="escalations")
    assignment = models.ForeignKey(Assignment, on_delete=models.CASCADE, related_name="escalations")
    rater = models.ForeignKey(Rater, on_delete=models.PROTECT, related_name="escalations")
    reason = models.TextField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    # Empty until an adjudicator decides (a check constraint ties it to the status).
    decision = models.CharField(max_length=16, choices=Decision.choices, blank=True, default="")
    decision_note = models.TextField(blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    withdrawn_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["study", "-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["rater", "response"],
                condition=Q(status="open"),
                name="escalation_open_once",
            ),
            models.CheckConstraint(
                condition=(Q(status="resolved") & ~Q(decision=""))
                | (~Q(status="resolved") & Q(decision="")),
                name="escalation_decided_when_resolved",
            ),
        ]
        indexes = [models.Index(fields=["study", "status"], name="escalation_study_status")]

    def __str__(self) -> str:
        return f"escalation {self.pk} of response {self.response_id} ({self.status})"

    @property
    def is_open(self) -> bool:
        return self.status == self.Status.OPEN


class LabelAdjudication(models.Model):
    """An adjudicator's label(s) for one user message of a distortion study whose clinicians
    disagree (docs/adjudication.md, "Distortion labels"). Same vocabulary and scheme as the
    clinicians' labelling (canonical names, dominant first for the ranked scheme); it is the
    message's gold label wherever the platform forms one from clinicians. One per message:
    saving again updates it."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="label_adjudications")
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="label_adjudications"
    )
    labels = models.JSONField(default=list)
    reason = models.CharField(max_length=32, choices=Adjudication.Reason.choices, blank=True)
    reason_text = models.TextField(blank=True)
    adjudicator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["study", "conversation"]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation"], name="label_adjudication_once_per_message"
            )
        ]

    def __str__(self) -> str:
        return f"label adjudicated {self.conversation_id}={', '.join(self.labels)}"


class AttributeThreshold(models.Model):
    """A study's adjudication threshold for one attribute of its rubric, in place of the
    study-wide ``Study.adjudication_threshold`` (docs/adjudication.md): scores this many points
    apart or more on that attribute go to the adjudicator. One per study and attribute."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="attribute_thresholds")
    attribute = models.ForeignKey(Attribute, on_delete=models.CASCADE, related_name="+")
    points = models.PositiveSmallIntegerField(
        validators=[MinValueValidator(1)],
        help_text="Scores this many points apart or more on this attribute go to an "
        "adjudicator; empty the row to use the study's threshold.",
    )

    class Meta:
        ordering = ["study", "attribute__position"]
        constraints = [
            models.UniqueConstraint(
                fields=["study", "attribute"], name="attribute_threshold_once_per_study"
            ),
            models.CheckConstraint(
                condition=models.Q(points__gte=1), name="attribute_threshold_at_least_one"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.attribute_id}: {self.points} points"

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        if self.attribute_id is None or self.study_id is None:
            return
        study = Study.objects.select_related("rubric").get(pk=self.study_id)
        if self.attribute.rubric_id != study.rubric_id:
            raise ValidationError(
                {"attribute": f"{self.attribute.name!r} is not an attribute of the study's rubric"}
            )
        widest = study.rubric.scale_max - study.rubric.scale_min
        if self.points is not None and self.points > widest:
            raise ValidationError(
                {
                    "points": f"at most {widest}: the rubric's scale is "
                    f"{study.rubric.scale_min}–{study.rubric.scale_max}, so scores are never "
                    f"further apart (a larger threshold would send nothing to adjudication)"
                }
            )
