from django.contrib import admin

from annotation.admin import ViewOnlyAdmin

from .models import SignInEvent, TokenName


@admin.register(SignInEvent)
class SignInEventAdmin(ViewOnlyAdmin):
    """The sign-in log, read-only: rows are written only by sign-ins."""

    list_display = ["at", "username", "user", "ip_address", "succeeded", "two_factor", "method"]
    list_filter = ["succeeded", "two_factor", "method"]
    search_fields = ["username", "ip_address"]
    date_hierarchy = "at"


@admin.register(TokenName)
class TokenNameAdmin(ViewOnlyAdmin):
    """Token names, read-only here: their owners name tokens on the token page."""

    list_display = ["name", "token"]
    search_fields = ["name"]
