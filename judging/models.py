"""Model endpoints and the runs (generation, judging) executed on Celery workers."""

from django.conf import settings
from django.db import models


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
    # Secrets: either the name of an environment variable, or a key entered by an admin. Neither
    # is ever rendered back (the admin form uses a write-only field) nor logged.
    api_key_env = models.CharField(max_length=100, blank=True)
    api_key = models.CharField(max_length=500, blank=True)
    default_params = models.JSONField(default=dict, blank=True)
    json_mode = models.BooleanField(default=True, help_text="ask for JSON output where supported")
    price_input_per_mtok = models.FloatField(default=0.0, help_text="USD per 1M input tokens")
    price_output_per_mtok = models.FloatField(default=0.0, help_text="USD per 1M output tokens")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


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

    study = models.ForeignKey("annotation.Study", on_delete=models.CASCADE, related_name="runs")
    endpoint = models.ForeignKey(ModelEndpoint, on_delete=models.PROTECT, related_name="runs")
    rater = models.ForeignKey(
        "annotation.Rater", on_delete=models.PROTECT, null=True, blank=True, related_name="runs"
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    subset = models.CharField(max_length=32, default="all")
    params = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} run #{self.pk} ({self.endpoint})"
