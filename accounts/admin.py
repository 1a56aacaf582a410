from django.contrib import admin

from annotation.admin import ViewOnlyAdmin

from .models import SignInEvent


@admin.register(SignInEvent)
class SignInEventAdmin(ViewOnlyAdmin):
    """The sign-in log, read-only: rows are written only by sign-ins."""

    list_display = ["at", "username", "user", "ip_address", "succeeded", "two_factor", "method"]
    list_filter = ["succeeded", "two_factor", "method"]
    search_fields = ["username", "ip_address"]
    date_hierarchy = "at"
