from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.forms import AdminUserCreationForm, UserChangeForm

from annotation.admin import ViewOnlyAdmin

from .models import ErasureRecord, SignInEvent, StudyPurgeRecord, TokenName, TotpCodeUse
from .users import username_clean


@admin.register(ErasureRecord)
class ErasureRecordAdmin(ViewOnlyAdmin):
    list_display = ["erased_at", "account_id", "erased_by", "reason"]


@admin.register(StudyPurgeRecord)
class StudyPurgeRecordAdmin(ViewOnlyAdmin):
    list_display = ["purged_at", "study_id", "study_name", "purged_by", "reason"]


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


@admin.register(TotpCodeUse)
class TotpCodeUseAdmin(ViewOnlyAdmin):
    """The last TOTP period each account gave a code for (a code works once), read-only."""

    list_display = ["user", "step"]
    search_fields = ["user__username"]


# --- Django's user admin, with the platform's username rule -------------------------------------
# Django's change form checks a new username for an exact clash only, so a rename to "Clin"
# beside "clin" failed in the LOWER(username) index with a server error; its add form knew case
# but not the platform's other rules (a letter or digit first: names reach CSVs and admin lists).
# Both now apply username_clean, the rule invites follow. django.contrib.auth.admin is imported
# (and so registers User) before it is replaced here, whatever the order of the apps.


def _clean_username(form: forms.ModelForm, renaming: int | None) -> str:
    try:
        return username_clean(username=form.cleaned_data.get("username") or "", renaming=renaming)
    except ValueError as exc:
        raise forms.ValidationError(str(exc)[0].upper() + str(exc)[1:] + ".") from None


class AccountChangeForm(UserChangeForm):
    def clean_username(self) -> str:
        return _clean_username(self, renaming=self.instance.pk)


class AccountCreationForm(AdminUserCreationForm):
    def clean_username(self) -> str:
        return _clean_username(self, renaming=None)


User = get_user_model()
admin.site.unregister(User)


@admin.register(User)
class AccountAdmin(UserAdmin):
    form = AccountChangeForm
    add_form = AccountCreationForm
