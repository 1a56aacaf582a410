"""Model endpoints and the runs (generation, judging) executed on Celery workers.

A `Run` is one endpoint doing one job for one study; its work is split into `RunItem`s, one per
target (a response to rate, or a conversation to answer) and repeat. Every item's state lives
here, in Postgres, so a killed worker or a restarted run resumes from the table, never from a
worker's memory. Progress, tokens and cost are aggregated from the items (`selectors`), so the
counters cannot drift from the rows they count.
"""

from datetime import datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from . import api_keys
from .fields import EncryptedKeyField
from .providers import STRUCTURED_OFF, STRUCTURED_OUTPUTS, structured_output_check


class ModelEndpoint(models.Model):
    """A provider + model name + family + default parameters; one row per model the team calls."""

    class Provider(models.TextChoices):
        OPENAI = "openai", "OpenAI"
        ANTHROPIC = "anthropic", "Anthropic"
        OPENAI_COMPATIBLE = "openai_compatible", "vLLM / any OpenAI-compatible server"
        VLLM_OFFLINE = "vllm_offline", "vLLM offline batch (GPU worker)"

    name = models.CharField(max_length=200, unique=True)
    provider = models.CharField(max_length=32, choices=Provider.choices)
    model = models.CharField(max_length=200)
    family = models.CharField(max_length=100)
    base_url = models.URLField(blank=True)
    # Secrets: either the name of an environment variable the operator allowed, or a key entered
    # by an admin, stored encrypted (judging.api_keys). Neither is ever rendered back (the admin
    # form uses a write-only field) nor logged.
    api_key_env = models.CharField(
        max_length=100, blank=True, validators=[api_keys.validate_api_key_env]
    )
    api_key = EncryptedKeyField(blank=True)
    default_params = models.JSONField(default=dict, blank=True)
    json_mode = models.BooleanField(default=True, help_text="ask for JSON output where supported")
    # Declared by the admin (an address cannot prove where a server stands): the endpoint runs on
    # servers the study team controls, so a study kept to local models may send texts to it.
    on_premises = models.BooleanField(
        default=False,
        verbose_name="on our own servers",
        help_text="This server (llama.cpp, vLLM) runs on machines the study team controls: "
        "studies kept to local models may use it. Never true for OpenAI or Anthropic.",
    )
    # Prices in USD per million tokens. NULL means "not set": the list price of a known model is
    # used (judging.services.prices), and for an unknown model the estimate says "price
    # unknown". 0 is a real price (a model on your own server).
    price_input_per_mtok = models.FloatField(
        null=True,
        blank=True,
        help_text="USD per 1M input tokens (blank: the list price, if known)",
    )
    price_output_per_mtok = models.FloatField(
        null=True,
        blank=True,
        help_text="USD per 1M output tokens (blank: the list price, if known)",
    )
    # Batch interfaces (OpenAI Batch, Anthropic Message Batches) sell the same calls at half the
    # price; blank: the list batch price, else the immediate price (an upper bound).
    price_batch_input_per_mtok = models.FloatField(
        null=True, blank=True, help_text="USD per 1M input tokens in batch mode"
    )
    price_batch_output_per_mtok = models.FloatField(
        null=True, blank=True, help_text="USD per 1M output tokens in batch mode"
    )
    supports_batch = models.BooleanField(
        default=False,
        help_text="OpenAI-compatible servers only: the server implements /v1/files and "
        "/v1/batches (OpenAI and Anthropic endpoints always do)",
    )
    timeout_s = models.FloatField(default=60.0, help_text="seconds allowed for one request")
    supports_temperature = models.BooleanField(
        default=True, help_text="off for OpenAI reasoning models (o1/o3/o4-mini)"
    )
    json_prefill = models.BooleanField(
        default=False, help_text="Anthropic only: prefill '{' when asking for JSON"
    )
    # Off by default: the papers' judges were prompted for JSON, and reproductions stay so.
    structured_output = models.CharField(
        max_length=32,
        choices=list(STRUCTURED_OUTPUTS.items()),
        default=STRUCTURED_OFF,
        help_text="send the rubric / label set as a JSON schema, in this server's dialect",
    )
    responder_key = models.CharField(
        max_length=100,
        blank=True,
        help_text="responder key of its generated responses (default: the name)",
    )
    # A disabled endpoint is not offered for new runs; runs that already use it keep it.
    enabled = models.BooleanField(
        default=True, help_text="offered for new runs (runs already launched keep their endpoint)"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    #: Providers whose servers are never the study team's: texts sent there leave the site.
    HOSTED_PROVIDERS = frozenset({Provider.OPENAI, Provider.ANTHROPIC})

    @property
    def keeps_texts_local(self) -> bool:
        """Whether texts sent here stay on the study team's servers: the offline vLLM worker is
        the platform's own; an OpenAI-compatible server only when an admin declared it."""
        if self.provider == self.Provider.VLLM_OFFLINE:
            return True
        return self.on_premises and self.provider not in self.HOSTED_PROVIDERS

    def clean(self) -> None:
        super().clean()
        self._clean_keeps_its_model()
        if self.on_premises and self.provider in self.HOSTED_PROVIDERS:
            raise ValidationError(
                {
                    "on_premises": f"{self.get_provider_display()} runs on its own servers, "
                    "not the study team's: a study kept to local models cannot send texts there"
                }
            )
        if self.provider == self.Provider.VLLM_OFFLINE:
            if self.structured_output != STRUCTURED_OFF:
                raise ValidationError(
                    {"structured_output": "offline vLLM endpoints only generate; leave it off"}
                )
            return
        try:
            structured_output_check(provider=self.provider, mode=self.structured_output)
        except ValueError as exc:
            raise ValidationError({"structured_output": str(exc)}) from None

    def _clean_keeps_its_model(self) -> None:
        """An endpoint with runs keeps its provider and model: its runs (a resumed or retried one
        too) call the endpoint as it is now, and their ratings stand under one judge, so another
        model would answer the rest under the same name. Another model is another endpoint."""
        if self.pk is None:
            return
        stored = ModelEndpoint.objects.filter(pk=self.pk).values("provider", "model").first()
        if stored is None or (stored["provider"], stored["model"]) == (self.provider, self.model):
            return
        runs = self.runs.count()
        if runs:
            raise ValidationError(
                {
                    "model": f"{runs} run(s) used this endpoint with {stored['provider']} model "
                    f"{stored['model']!r}; its provider and model stay as they are. Add a new "
                    "endpoint for another model."
                }
            )


class Run(models.Model):
    class Kind(models.TextChoices):
        GENERATION = "generation", "Generation"
        JUDGE = "judge", "Judge"
        LABELLING = "labelling", "Distortion labelling"

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        CANCELLING = "cancelling", "Cancelling"
        CANCELLED = "cancelled", "Cancelled"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    class Mode(models.TextChoices):
        IMMEDIATE = "immediate", "Immediate (one request per item)"
        BATCH = "batch", "Batch (provider batch interface, about half price, up to 24 h)"

    class Subset(models.TextChoices):
        ALL = "all", "All responses"
        UNRATED = "unrated", "Not yet rated by this judge"
        SAMPLE = "sample", "A random sample"
        CLINICIAN_RATED = "clinician", "Rated by a clinician"
        MISSING = "missing", "Missing responses (generation)"

    study = models.ForeignKey("annotation.Study", on_delete=models.CASCADE, related_name="runs")
    endpoint = models.ForeignKey(ModelEndpoint, on_delete=models.PROTECT, related_name="runs")
    rater = models.ForeignKey(
        "annotation.Rater", on_delete=models.PROTECT, null=True, blank=True, related_name="runs"
    )
    # Generation runs: who the generated responses are stored under.
    responder = models.ForeignKey(
        "annotation.Responder", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    mode = models.CharField(max_length=16, choices=Mode.choices, default=Mode.IMMEDIATE)
    # What the admin confirmed at launch: estimated input tokens and cost in both modes.
    cost_estimate = models.JSONField(default=dict, blank=True)
    subset = models.CharField(max_length=32, default="all")
    sample_size = models.PositiveIntegerField(null=True, blank=True)
    sample_seed = models.IntegerField(default=0)
    repeats = models.PositiveSmallIntegerField(default=1)
    temperature = models.FloatField(null=True, blank=True)
    max_tokens = models.PositiveIntegerField(null=True, blank=True)
    # Requests in flight for the whole run, however many worker loops share it (a redelivered
    # task adds a loop, never requests), and a global request rate per endpoint (None: no cap
    # beyond the provider's own 429s, which pause every worker for Retry-After).
    concurrency = models.PositiveSmallIntegerField(default=32)
    rate_limit = models.FloatField(null=True, blank=True, help_text="requests per second")
    parallel_tasks = models.PositiveSmallIntegerField(
        default=2, help_text="worker tasks sharing the run (one per worker process)"
    )
    max_output_attempts = models.PositiveSmallIntegerField(
        default=3, help_text="how often an unusable judge output is re-asked"
    )
    params = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, help_text="why the whole run stopped, if it did")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The last sign of life of any worker loop on the run (or when loops were last sent): the
    # sweeper restarts a running run whose loops have all been silent for longer than a lease.
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} run #{self.pk} ({self.endpoint})"

    @property
    def is_active(self) -> bool:
        return self.status in (self.Status.PENDING, self.Status.RUNNING, self.Status.CANCELLING)

    @property
    def can_cancel(self) -> bool:
        return self.status in (self.Status.PENDING, self.Status.RUNNING)

    def can_resume(self, *, pending_items: int) -> bool:
        """A cancelled run resumes; a failed or finished one while items are still pending (a
        run stopped by a bad key keeps them; one whose every item failed has none: retry it)."""
        return self.status == self.Status.CANCELLED or (
            self.status in (self.Status.DONE, self.Status.FAILED) and pending_items > 0
        )

    def can_retry(self, *, failed_items: int) -> bool:
        return failed_items > 0 and self.status != self.Status.CANCELLING

    @property
    def is_batch(self) -> bool:
        return self.mode == self.Mode.BATCH

    def silent_for(self, now: datetime) -> float:
        """Seconds since any worker loop of this running run was last heard of (0 otherwise)."""
        if self.status != self.Status.RUNNING or self.heartbeat_at is None:
            return 0.0
        return max(0.0, (now - self.heartbeat_at).total_seconds())


class RunItem(models.Model):
    """One unit of work: rate `response` (judge runs) or answer `conversation` (generation).

    pending → running (claimed by one worker loop, `claim_token`) → done | failed. A running
    item whose heartbeat is stale belonged to a worker that died; the next claim takes it over.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="items")
    response = models.ForeignKey(
        "annotation.Response", on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    conversation = models.ForeignKey(
        "annotation.Conversation",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
    )
    repeat = models.PositiveSmallIntegerField(default=0)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0, help_text="times claimed by a worker")
    requests = models.PositiveSmallIntegerField(default=0, help_text="LLM requests made")
    # Batch mode only: the next request's token limit where a re-ask after a cut-off answer
    # raised it (immediate mode keeps it in the worker between attempts).
    max_tokens = models.PositiveIntegerField(
        null=True, blank=True, help_text="token limit of the next batch request, if raised"
    )
    last_error = models.TextField(blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.FloatField(default=0.0)
    latency_s = models.FloatField(null=True, blank=True)
    # Every completion received for this item, by any loop, whether its result was stored or
    # not (a loop that lost its claim, a cancel, a worker killed before storing): what the
    # provider bills. The fields above count only the results that were stored.
    billed_completions = models.PositiveIntegerField(default=0)
    billed_input_tokens = models.PositiveIntegerField(default=0)
    billed_output_tokens = models.PositiveIntegerField(default=0)
    billed_cost_usd = models.FloatField(default=0.0)
    claim_token = models.CharField(max_length=32, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "response", "repeat"],
                condition=Q(response__isnull=False),
                name="runitem_unique_response_repeat",
            ),
            models.UniqueConstraint(
                fields=["run", "conversation", "repeat"],
                condition=Q(conversation__isnull=False),
                name="runitem_unique_conversation_repeat",
            ),
            models.CheckConstraint(
                condition=Q(response__isnull=False, conversation__isnull=True)
                | Q(response__isnull=True, conversation__isnull=False),
                name="runitem_one_target",
            ),
        ]
        indexes = [models.Index(fields=["run", "status"])]

    def __str__(self) -> str:
        target = (
            f"response {self.response_id}"
            if self.response_id
            else (f"conversation {self.conversation_id}")
        )
        return f"run {self.run_id} {target} #{self.repeat} ({self.status})"


class ProviderBatch(models.Model):
    """One request file sent to a provider's batch interface for a batch-mode run.

    Its items are claimed (RunItem.claim_token = `token`) from submission until their results
    are stored or handed back, so a result is stored only while the item still names this
    batch: a second download, a racing poller or a late result of an older attempt stores nothing.
    """

    class Status(models.TextChoices):
        BUILDING = "building", "Building and uploading"
        IN_PROGRESS = "in_progress", "At the provider"
        CANCELLING = "cancelling", "Cancelling at the provider"
        ENDED = "ended", "Ended; results being stored"
        STORED = "stored", "Results stored"
        FAILED = "failed", "Failed"
        ABANDONED = "abandoned", "Abandoned before upload"

    OPEN = (Status.BUILDING, Status.IN_PROGRESS, Status.CANCELLING, Status.ENDED)

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="batches")
    token = models.CharField(max_length=32, unique=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.BUILDING)
    provider_batch_id = models.CharField(max_length=200, blank=True)
    input_file_id = models.CharField(max_length=200, blank=True)
    provider_status = models.CharField(max_length=32, blank=True)
    request_count = models.PositiveIntegerField(default=0)
    bytes = models.PositiveBigIntegerField(default=0)
    # The custom ids it covers: "i<item id>-a<attempt>" for each item, first and last item id.
    first_item_id = models.BigIntegerField(null=True, blank=True)
    last_item_id = models.BigIntegerField(null=True, blank=True)
    results_stored = models.PositiveIntegerField(default=0)
    results_reasked = models.PositiveIntegerField(default=0)
    results_failed = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    poll_attempts = models.PositiveIntegerField(default=0)
    polled_at = models.DateTimeField(null=True, blank=True)
    next_poll_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "id"]
        indexes = [models.Index(fields=["status", "next_poll_at"])]

    def __str__(self) -> str:
        return f"batch {self.provider_batch_id or self.token} of run {self.run_id} ({self.status})"
