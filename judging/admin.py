from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from .forms import EndpointForm
from .models import ModelEndpoint, ProviderBatch, Run, RunItem


@admin.register(ModelEndpoint)
class ModelEndpointAdmin(admin.ModelAdmin):
    form = EndpointForm
    list_display = ["name", "provider", "model", "family", "base_url", "has_key", "enabled"]
    list_filter = ["enabled", "provider", "family"]

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
