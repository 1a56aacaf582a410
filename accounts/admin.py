from django.contrib import admin

from .models import SignInEvent


@admin.register(SignInEvent)
class SignInEventAdmin(admin.ModelAdmin):
    """The sign-in log, read-only: rows are written only by sign-ins."""

    list_display = ["at", "username", "user", "ip_address", "succeeded", "two_factor", "method"]
    list_filter = ["succeeded", "two_factor", "method"]
    search_fields = ["username", "ip_address"]
    date_hierarchy = "at"

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
