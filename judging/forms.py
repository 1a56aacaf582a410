"""Launch forms for judge and generation runs, and the endpoint form (validation only;
services do the writes)."""

from typing import Any, cast

from django import forms

from annotation.models import Study
from judging import api_keys, prompts
from mentalbench import encryption

from .models import ModelEndpoint, Run
from .services import TEMPERATURE_ZERO_REFUSED
from .services.endpoints import endpoints_for_launch


class EndpointForm(forms.ModelForm):
    """An endpoint, in /judging/endpoints/ and in Django's admin alike."""

    # Write-only: the stored key is never rendered back into the page.
    api_key = forms.CharField(
        required=False,
        max_length=500,
        widget=forms.PasswordInput(render_value=False),
        help_text="Leave blank to keep the stored key; it is stored encrypted "
        "(MENTALBENCH_ENCRYPTION_KEYS). Prefer api_key_env (an environment variable name) "
        "where the workers' environment can hold the secret.",
    )
    clear_api_key = forms.BooleanField(
        required=False,
        label="Remove the stored key",
        help_text="a stored key wins over api_key_env: remove it to use the variable instead",
    )

    # A base URL without a scheme means https (Django 6's default; said here, not assumed).
    base_url = forms.URLField(
        required=False,
        max_length=ModelEndpoint._meta.get_field("base_url").max_length,
        assume_scheme="https",
        help_text="Blank for the provider's own API; an OpenAI-compatible server otherwise, "
        "e.g. http://127.0.0.1:8000/v1 for vLLM.",
    )

    class Meta:
        model = ModelEndpoint
        fields = [
            "name",
            "provider",
            "model",
            "family",
            "base_url",
            "on_premises",
            "api_key_env",
            "api_key",
            "default_params",
            "json_mode",
            "structured_output",
            "supports_temperature",
            "json_prefill",
            "timeout_s",
            "responder_key",
            "price_input_per_mtok",
            "price_output_per_mtok",
            "price_batch_input_per_mtok",
            "price_batch_output_per_mtok",
            "supports_batch",
            "enabled",
        ]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Read when the form is built: the operator's rule comes from the environment. (Staff
        # who may only view endpoints get a form without editable fields.)
        if "api_key_env" in self.fields:
            self.fields["api_key_env"].help_text = (
                "The name of an environment variable on the workers that holds the key; "
                f"{api_keys.allowed_key_env_rule()}."
            )

    def clean_api_key(self) -> str:
        new = self.cleaned_data.get("api_key", "")
        if not new:
            return self.instance.api_key if self.instance.pk else ""
        if encryption.is_encrypted(new):
            # The field would take it for ciphertext and store it as it is.
            raise forms.ValidationError(
                f"An API key cannot start with {encryption.ENCRYPTED_PREFIX!r}."
            )
        if not encryption.encryption_configured():
            # Refused here rather than failing on save: the field never stores plaintext.
            raise forms.ValidationError(
                "Keys typed here are stored encrypted, but MENTALBENCH_ENCRYPTION_KEYS is not set "
                "on this server: set it (docs/judging.md, Keys), or leave this blank and name an "
                "environment variable in api_key_env."
            )
        return new

    def clean_default_params(self) -> dict[str, Any]:
        value = self.cleaned_data.get("default_params")
        if value in (None, ""):
            return {}
        if not isinstance(value, dict):
            raise forms.ValidationError(
                'Default parameters are a JSON object, e.g. {"top_p": 0.9, "seed": 7}.'
            )
        return value

    def clean(self) -> dict[str, Any]:
        data = cast(dict[str, Any], super().clean())  # ModelForm.clean returns cleaned_data
        if data.get("clear_api_key") and not self.data.get(self.add_prefix("api_key")):
            data["api_key"] = ""
        return data

    def endpoint_fields(self) -> dict[str, Any]:
        """The model fields to save (judging.services.endpoints.endpoint_save)."""
        return {name: self.cleaned_data[name] for name in self._meta.fields or ()}


class _ExecutionFields(forms.Form):
    """How a run executes: settings most launches leave at their defaults, shown folded under
    the fields a person thinks of first (what to run, on what, how often: ``main_fields``)."""

    #: Shown folded, as "Advanced settings", after the fields of the launch's question.
    ADVANCED = (
        "mode", "temperature", "max_tokens", "max_output_attempts", "concurrency", "rate_limit",
        "parallel_tasks",
    )  # fmt: skip

    def main_fields(self) -> list[forms.BoundField]:
        return [field for field in self if field.name not in self.ADVANCED]

    def advanced_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.ADVANCED if name in self.fields]

    mode = forms.ChoiceField(
        choices=Run.Mode.choices,
        initial=Run.Mode.IMMEDIATE,
        required=False,
        help_text="batch: the provider's batch interface (OpenAI, Anthropic, servers marked "
        "'supports batch'): about half the price, results within 24 hours",
    )
    concurrency = forms.IntegerField(
        min_value=1,
        max_value=1000,
        initial=32,
        help_text="requests in flight for the whole run, shared by its worker tasks",
    )
    rate_limit = forms.FloatField(
        required=False,
        min_value=0.01,
        help_text="requests per second for this endpoint across all workers (blank: no cap)",
    )
    parallel_tasks = forms.IntegerField(
        min_value=1, max_value=64, initial=2, help_text="worker tasks (one per worker process)"
    )

    def clean_mode(self) -> str:
        return self.cleaned_data.get("mode") or Run.Mode.IMMEDIATE


class JudgeRunForm(_ExecutionFields):
    study = forms.ModelChoiceField(queryset=Study.objects.all())
    endpoint = forms.ModelChoiceField(
        queryset=endpoints_for_launch(kind=Run.Kind.JUDGE), label="Judge endpoint"
    )
    subset = forms.ChoiceField(
        choices=[
            (Run.Subset.ALL, Run.Subset.ALL.label),
            (Run.Subset.UNRATED, Run.Subset.UNRATED.label),
            (Run.Subset.SAMPLE, Run.Subset.SAMPLE.label),
            (Run.Subset.CLINICIAN_RATED, Run.Subset.CLINICIAN_RATED.label),
        ]
    )
    sample_size = forms.IntegerField(required=False, min_value=1, help_text="for a sample")
    sample_seed = forms.IntegerField(initial=0, help_text="the same seed draws the same sample")
    repeats = forms.IntegerField(
        min_value=1, max_value=100, initial=1, help_text="independent samples per response"
    )
    temperature = forms.FloatField(
        required=False, min_value=0, max_value=2, help_text="blank: the provider's default"
    )
    max_tokens = forms.IntegerField(required=False, min_value=16, initial=1024)
    max_output_attempts = forms.IntegerField(
        min_value=1,
        max_value=10,
        initial=3,
        help_text="asks per response before it counts as failed",
    )

    def clean(self) -> dict[str, Any]:
        data = cast(dict[str, Any], super().clean())  # Form.clean returns cleaned_data
        if data.get("subset") == Run.Subset.SAMPLE and not data.get("sample_size"):
            self.add_error("sample_size", "A sample needs a size.")
        return data


class LabellingRunForm(_ExecutionFields):
    """Distortion labelling with the Appendix D prompt of the study's scheme, N times per item."""

    study = forms.ModelChoiceField(
        queryset=Study.objects.filter(kind=Study.Kind.DISTORTION_LABELLING),
        help_text="a cognitive-distortion labelling study (its scheme picks the RLP or MLP)",
    )
    endpoint = forms.ModelChoiceField(
        queryset=endpoints_for_launch(kind=Run.Kind.LABELLING), label="Endpoint"
    )
    subset = forms.ChoiceField(
        choices=[
            (Run.Subset.ALL, "All user messages"),
            (Run.Subset.SAMPLE, Run.Subset.SAMPLE.label),
        ]
    )
    sample_size = forms.IntegerField(required=False, min_value=1, help_text="for a sample")
    sample_seed = forms.IntegerField(initial=0, help_text="the same seed draws the same sample")
    repeats = forms.IntegerField(
        min_value=1,
        max_value=100,
        initial=5,
        help_text="independent runs per message (the paper: 5, consensus from 4 of 5)",
    )
    temperature = forms.FloatField(
        required=False,
        min_value=0,
        max_value=2,
        initial=0.5,
        help_text="the paper used 0.5 and 0.7; 0 is refused for repeated runs (Appendix C)",
    )
    max_tokens = forms.IntegerField(required=False, min_value=16, initial=256)
    max_output_attempts = forms.IntegerField(
        min_value=1, max_value=10, initial=3, help_text="asks per message before it is invalid"
    )

    def clean(self) -> dict[str, Any]:
        data = cast(dict[str, Any], super().clean())  # Form.clean returns cleaned_data
        if data.get("subset") == Run.Subset.SAMPLE and not data.get("sample_size"):
            self.add_error("sample_size", "A sample needs a size.")
        temperature = data.get("temperature")
        if temperature is not None and temperature <= 0 and (data.get("repeats") or 1) > 1:
            self.add_error("temperature", TEMPERATURE_ZERO_REFUSED)
        return data


class GenerationRunForm(_ExecutionFields):
    study = forms.ModelChoiceField(queryset=Study.objects.all())
    endpoints = forms.ModelMultipleChoiceField(
        queryset=endpoints_for_launch(kind=Run.Kind.GENERATION),
        widget=forms.CheckboxSelectMultiple,
        help_text="one run per model; only conversations without its response are generated",
    )
    temperature = forms.FloatField(min_value=0, max_value=2, initial=prompts.GENERATION_TEMPERATURE)
    max_tokens = forms.IntegerField(min_value=16, initial=prompts.GENERATION_MAX_TOKENS)


class PreviewForm(forms.Form):
    """What the preview needs from either launch form (other fields are ignored)."""

    study = forms.ModelChoiceField(queryset=Study.objects.all())
    endpoint = forms.ModelChoiceField(queryset=ModelEndpoint.objects.all(), required=False)
    endpoints = forms.ModelMultipleChoiceField(queryset=ModelEndpoint.objects.all(), required=False)
