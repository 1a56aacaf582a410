"""Launch forms for judge and generation runs (validation only; services do the writes)."""

from typing import Any, cast

from django import forms

from annotation.models import Study
from judging import prompts

from .models import ModelEndpoint, Run
from .services import TEMPERATURE_ZERO_REFUSED

HTTP_PROVIDERS = [
    ModelEndpoint.Provider.OPENAI,
    ModelEndpoint.Provider.ANTHROPIC,
    ModelEndpoint.Provider.OPENAI_COMPATIBLE,
]


class _ExecutionFields(forms.Form):
    mode = forms.ChoiceField(
        choices=Run.Mode.choices,
        initial=Run.Mode.IMMEDIATE,
        required=False,
        help_text="batch: the provider's batch interface (OpenAI, Anthropic, servers marked "
        "'supports batch'): about half the price, results within 24 hours",
    )
    # Set once the admin has seen the cost estimate; launching needs it.
    confirm_cost = forms.BooleanField(
        required=False,
        label="I have read the cost estimate",
        help_text="the first submit shows the estimate; tick this and submit again to launch",
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
        queryset=ModelEndpoint.objects.filter(provider__in=HTTP_PROVIDERS), label="Judge endpoint"
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
        queryset=ModelEndpoint.objects.filter(provider__in=HTTP_PROVIDERS), label="Endpoint"
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
        queryset=ModelEndpoint.objects.all(),
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
