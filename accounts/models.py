from django.conf import settings
from django.db import models


class SignInEvent(models.Model):
    """One sign-in attempt: who, when, from where, whether it succeeded and with which factors.

    Written by the auth signals (accounts.signals); kept SIGNIN_LOG_DAYS days. Holds no password
    and no code, only the username as typed (a failed attempt may name no real account).
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    username = models.CharField(max_length=150, blank=True)
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    ip_address = models.GenericIPAddressField(null=True, blank=True)
    succeeded = models.BooleanField()
    two_factor = models.BooleanField(default=False, help_text="a second factor was used")
    method = models.CharField(max_length=32, blank=True, help_text="password or sso")

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.username} {'ok' if self.succeeded else 'failed'} at {self.at:%Y-%m-%d %H:%M}"


class TokenName(models.Model):
    """What a researcher calls one of their API tokens ("laptop notebook", "CI export"), so the
    list of live tokens says which script each one serves. Knox's token model has no such field;
    this row goes with its token (revoked or expired tokens are deleted, and so is the name)."""

    token = models.OneToOneField(
        "knox.AuthToken", on_delete=models.CASCADE, primary_key=True, related_name="token_name"
    )
    name = models.CharField(max_length=64)

    def __str__(self) -> str:
        return self.name


class TotpCodeUse(models.Model):
    """The latest TOTP time step (30-second period) whose code an account gave, at sign-in,
    re-authentication or enrolment. A code of that step or an earlier one is refused from then
    on (RFC 6238, section 5.2), so a code works once: one seen over a shoulder at enrolment or
    typed into the wrong tab cannot sign in again within its window. In the database, not a
    cache, so every web process and a restart see the same step."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    step = models.BigIntegerField(help_text="Unix time // 30 of the last code accepted")

    def __str__(self) -> str:
        return f"{self.user_id}: step {self.step}"


class ErasureRecord(models.Model):
    """That a person's personal data was erased, by whom and when: the audit of an erasure
    request. It names the account by its number only (its name is what was erased) and counts
    what went; the ratings stay, under the account's pseudonymous study codes."""

    account_id = models.PositiveIntegerField(help_text="the erased account's number")
    erased_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    erased_at = models.DateTimeField(auto_now_add=True)
    reason = models.CharField(max_length=200, blank=True, help_text="e.g. the request's reference")
    removed = models.JSONField(default=dict, help_text="what was removed, by kind: counts")

    class Meta:
        ordering = ["-erased_at", "-id"]

    def __str__(self) -> str:
        return f"account {self.account_id} erased at {self.erased_at:%Y-%m-%d %H:%M}"


class StudyPurgeRecord(models.Model):
    """That a whole study was deleted (`manage.py purge_study`), by whom and when: its name and
    number, and counts of what went, by kind. The study's data is gone; this row is what is left
    of it, so an audit can tell a purged study from one that never existed."""

    study_id = models.PositiveIntegerField(help_text="the purged study's number")
    study_name = models.CharField(max_length=200)
    purged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    purged_at = models.DateTimeField(auto_now_add=True)
    reason = models.CharField(max_length=200, blank=True, help_text="e.g. the request's reference")
    removed = models.JSONField(default=dict, help_text="what was deleted, by kind: counts")

    class Meta:
        ordering = ["-purged_at", "-id"]

    def __str__(self) -> str:
        return (
            f"study {self.study_id} ({self.study_name}) purged at {self.purged_at:%Y-%m-%d %H:%M}"
        )
