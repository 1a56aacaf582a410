from django import forms
from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from . import api_keys
from .models import ModelEndpoint, ProviderBatch, Run, RunItem


class ModelEndpointForm(forms.ModelForm):
    # Write-only: the stored key is never rendered back into the page.
    api_key = forms.CharField(
        required=False,
        max_length=500,
        widget=forms.PasswordInput(render_value=False),
        help_text="Leave blank to keep the stored key; it is stored encrypted "
        "(MENTALBENCH_ENCRYPTION_KEYS). Prefer api_key_env (an environment variable name) "
        "where the workers' environment can hold the secret.",
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
        if api_keys.is_encrypted(new):
            # The field would take it for ciphertext and store it as it is.
            raise forms.ValidationError(
                f"An API key cannot start with {api_keys.ENCRYPTED_PREFIX!r}."
            )
        if not api_keys.encryption_configured():
            # Refused here rather than failing on save: the field never stores plaintext.
            raise forms.ValidationError(
                "Keys typed here are stored encrypted, but MENTALBENCH_ENCRYPTION_KEYS is not set "
                "on this server: set it (docs/judging.md, Keys), or leave this blank and name an "
                "environment variable in api_key_env."
            )
        return new


@admin.register(ModelEndpoint)
class ModelEndpointAdmin(admin.ModelAdmin):
    form = ModelEndpointForm
    list_display = ["name", "provider", "model", "family", "base_url", "has_key"]
    list_filter = ["provider", "family"]

    @admin.display(boolean=True, description="key set")
    def has_key(self, obj: ModelEndpoint) -> bool:
        return bool(obj.api_key or obj.api_key_env)

    def get_fields(self, request, obj=None):
        fields = list(super().get_fields(request, obj))
        if not self.has_change_permission(request, obj):
            # A view-only page shows every field as text: the stored key (ciphertext) is left
            # out, and whether there is one is shown instead.
            fields = [f for f in fields if f != "api_key"] + ["has_key"]
        return fields


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "kind", "mode", "study", "endpoint", "status", "created_at", "page"]
    list_filter = ["kind", "status"]
    # Runs are launched, cancelled and resumed from their own pages, which keep the items and
    # the workers consistent; the admin only shows them.
    readonly_fields = [field.name for field in Run._meta.fields]

    @admin.display(description="run page")
    def page(self, obj: Run) -> str:
        return format_html('<a href="{}">progress</a>', reverse("judging:run", args=[obj.pk]))

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(RunItem)
class RunItemAdmin(admin.ModelAdmin):
    list_display = ["id", "run", "response", "conversation", "repeat", "status", "requests"]
    list_filter = ["status"]
    list_select_related = ["run__endpoint", "response__responder", "conversation__study"]
    raw_id_fields = ["run", "response", "conversation"]
    readonly_fields = [field.name for field in RunItem._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(ProviderBatch)
class ProviderBatchAdmin(admin.ModelAdmin):
    """Read-only: the batches of batch-mode runs, as the poller recorded them."""

    list_display = ["id", "run", "provider_batch_id", "status", "request_count", "polled_at"]
    list_filter = ["status"]
    raw_id_fields = ["run"]
    readonly_fields = [field.name for field in ProviderBatch._meta.fields]
