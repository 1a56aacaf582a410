from django import forms
from django.contrib import admin

from .models import ModelEndpoint, Run


class ModelEndpointForm(forms.ModelForm):
    # Write-only: the stored key is never rendered back into the page.
    api_key = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Leave blank to keep the stored key. Prefer api_key_env (an environment "
        "variable name) where the workers' environment can hold the secret.",
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
            "price_input_per_mtok",
            "price_output_per_mtok",
        ]

    def clean_api_key(self) -> str:
        new = self.cleaned_data.get("api_key", "")
        return new or (self.instance.api_key if self.instance.pk else "")


@admin.register(ModelEndpoint)
class ModelEndpointAdmin(admin.ModelAdmin):
    form = ModelEndpointForm
    list_display = ["name", "provider", "model", "family", "base_url", "has_key"]
    list_filter = ["provider", "family"]

    @admin.display(boolean=True, description="key set")
    def has_key(self, obj: ModelEndpoint) -> bool:
        return bool(obj.api_key or obj.api_key_env)


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "kind", "study", "endpoint", "status", "created_at"]
    list_filter = ["kind", "status"]
