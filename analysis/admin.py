from django.contrib import admin

from .models import ExportLog


@admin.register(ExportLog)
class ExportLogAdmin(admin.ModelAdmin):
    list_display = ["created_at", "user", "study", "channel", "what", "rows"]
    list_filter = ["channel", "what"]
    search_fields = ["user__username", "study__name"]
    readonly_fields = ["user", "study", "channel", "what", "params", "rows", "created_at"]

    # An audit log is append-only: nobody edits or deletes entries through the admin.
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
