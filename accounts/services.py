"""Writes of the accounts app: researchers' own API tokens (knox: only a SHA-512 digest of a
token is stored), the sign-in log, the TOTP codes already used, forgot-password e-mails, and
the data-protection deletions: a person's data erased on request, a whole study purged."""

from collections import Counter
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import ProtectedError, Q
from django.utils import timezone
from knox.models import AuthToken

from .models import ErasureRecord, SignInEvent, StudyPurgeRecord, TokenName, TotpCodeUse
from .roles import can_read_analysis, user_can_manage
from .selectors import api_tokens_live, two_factor_required, two_factor_used, user_has_totp


class TokenError(ValueError):
    """A token request that cannot be honoured; the message says why."""


@transaction.atomic
def api_token_create(*, user, days: int, name: str = "") -> tuple[AuthToken, str]:
    """A new token for `user`, valid `days` days, called `name` in their list of tokens. The raw
    token is returned here once and is never stored: show it to the user now, it cannot be shown
    again."""
    name = name.strip()
    if len(name) > TokenName._meta.get_field("name").max_length:  # type: ignore[operator]
        raise TokenError("a token's name is at most 64 characters")
    if not can_read_analysis(user):
        raise PermissionDenied("API tokens are for researchers and admins")
    if two_factor_required(user=user) and not user_has_totp(user=user):
        # Such a token would not work (accounts.authentication): refuse to make it.
        raise TokenError("enrol a second factor (an authenticator app) before making a token")
    if not 1 <= days <= settings.API_TOKEN_MAX_DAYS:
        raise TokenError(f"a token lasts 1 to {settings.API_TOKEN_MAX_DAYS} days, not {days}")
    # The user row is locked so two tabs cannot both pass the limit check.
    get_user_model().objects.select_for_update().filter(pk=user.pk).first()
    live = api_tokens_live(user=user).count()
    if live >= settings.API_TOKENS_PER_USER:
        raise TokenError(
            f"you have {live} live tokens, the most allowed: revoke one you no longer use first"
        )
    instance, raw = AuthToken.objects.create(user=user, expiry=timedelta(days=days))
    if name:
        TokenName.objects.create(token=instance, name=name)
    return instance, raw


def api_token_revoke(*, user, digest: str) -> bool:
    """Delete one of the user's own tokens; False when there is no such token of theirs (another
    user's token is never touched). Requests with it fail from now on."""
    deleted, _ = AuthToken.objects.filter(user=user, digest=digest).delete()
    return bool(deleted)


def signin_event_record(*, request, user, username: str, ok: bool) -> SignInEvent:
    """One row of the sign-in log; rows older than SIGNIN_LOG_DAYS go as new ones arrive."""
    from axes.helpers import get_client_ip_address

    SignInEvent.objects.filter(
        at__lt=timezone.now() - timedelta(days=settings.SIGNIN_LOG_DAYS)
    ).delete()
    records = getattr(request, "session", None) is not None and user is not None
    methods = set()
    if records:
        from allauth.account.authentication import get_authentication_records

        methods = {r.get("method") for r in get_authentication_records(request, user)}
    return SignInEvent.objects.create(
        user=user,
        username=username[:150],
        ip_address=get_client_ip_address(request) or None,
        succeeded=ok,
        two_factor=bool(records and two_factor_used(request=request, user=user)),
        method="sso" if "socialaccount" in methods else "password",
    )


@transaction.atomic
def totp_step_claim(*, user, step: int) -> bool:
    """Record that `user` gave the TOTP code of time step `step`; False, changing nothing, when
    a code of this step or a later one was given before (the code was used, or is older than
    one used). The account's row is locked, so of two requests with one code only one wins."""
    use, created = TotpCodeUse.objects.select_for_update().get_or_create(
        user=user, defaults={"step": step}
    )
    if created:
        return True
    if step <= use.step:
        return False
    use.step = step
    use.save(update_fields=["step"])
    return True


def password_reset_mail_send(*, email: str) -> int:
    """E-mail a password link to every active account that has `email` and may reset its
    password; the number sent (0 for an address no account has: nothing is sent to it).

    Runs on a worker (accounts.tasks), with no request: the link is built from SITE_URL,
    never from a Host header. An account that signs in through single sign-on and has no
    password here gets no link: a password would keep it open after the identity provider
    closed it (an admin's set-password link still can).
    """
    from allauth.account import app_settings as account_settings
    from allauth.account.adapter import get_adapter as get_account_adapter
    from allauth.account.internal.userkit import filter_users_by_email
    from allauth.account.utils import user_pk_to_url_str
    from allauth.socialaccount.models import SocialAccount
    from django.urls import reverse

    users = filter_users_by_email(email, is_active=True, prefer_verified=True, for_login=True)
    single_sign_on = set(
        SocialAccount.objects.filter(user__in=[u.pk for u in users]).values_list(
            "user_id", flat=True
        )
    )
    adapter = get_account_adapter()
    generator = account_settings.PASSWORD_RESET_TOKEN_GENERATOR()
    site = SiteName(name="MentalBench", domain=settings.SITE_URL.split("://", 1)[1])
    sent = 0
    for user in users:
        if user.pk in single_sign_on and not user.has_usable_password():
            continue
        path = reverse(
            "account_reset_password_from_key",
            kwargs={"uidb36": user_pk_to_url_str(user), "key": generator.make_token(user)},
        )
        context = {
            "user": user,
            "email": email,
            "username": user.get_username(),
            "password_reset_url": settings.SITE_URL + path,
            "current_site": site,
        }
        adapter.render_mail("account/email/password_reset_key", email, context).send()
        sent += 1
    return sent


@dataclass(frozen=True)
class SiteName:
    """What allauth's e-mail templates call the current site (`current_site.name`, `.domain`),
    from SITE_URL: they would otherwise ask the request for it."""

    name: str
    domain: str


class ErasureError(ValueError):
    """An erasure that cannot be done (no such account, or not the actor's to erase)."""


@transaction.atomic
def person_erase(*, user_id: int, actor=None, reason: str = "") -> ErasureRecord:
    """Erase a person's personal data on request; their ratings stay, as research data, under
    their pseudonymous study codes (C01, …), which never held their name.

    Gone: the username (now ``erased-<number>``), names and e-mail address, the password and
    every way to sign in (second factors, SSO links, API tokens; the account is deactivated, so
    its sessions end), the sign-in log and lock-out records under the account or its old name,
    the e-mail records and preferences. The clinician (rater) named after the account takes a
    pseudonym too, so identified exports name no one. `actor` None is the operator (the
    command line); an admin may erase only accounts with fewer rights than their own.
    Recorded in `ErasureRecord`, by number.
    """
    from allauth.account.models import EmailAddress
    from allauth.mfa.models import Authenticator
    from allauth.socialaccount.models import SocialAccount
    from axes.models import AccessAttempt, AccessFailureLog, AccessLog

    from annotation.models import MailPreference, MailSent, Rater

    User = get_user_model()
    user = User.objects.select_for_update().filter(pk=user_id).first()
    if user is None:
        raise ErasureError(f"no account number {user_id}")
    if actor is not None and not user_can_manage(actor=actor, target=user):
        raise ErasureError(
            f"you may not erase account {user_id}: admins act only on accounts with fewer "
            "rights than their own"
        )
    old_name = user.get_username()
    removed: dict[str, int] = {}

    def gone(kind: str, queryset) -> None:
        removed[kind] = queryset.delete()[0]

    gone("sign-in log entries", SignInEvent.objects.filter(user=user))
    gone(
        "sign-in log entries under the name", SignInEvent.objects.filter(username__iexact=old_name)
    )
    for model in (AccessAttempt, AccessLog, AccessFailureLog):
        gone(
            f"lock-out records ({model.__name__})", model.objects.filter(username__iexact=old_name)
        )
    gone("e-mail addresses", EmailAddress.objects.filter(user=user))
    gone("single sign-on links", SocialAccount.objects.filter(user=user))
    gone("second factors", Authenticator.objects.filter(user=user))
    gone("TOTP code records", TotpCodeUse.objects.filter(user=user))
    gone("API tokens", AuthToken.objects.filter(user=user))
    gone("e-mail records", MailSent.objects.filter(user=user))
    gone("e-mail preferences", MailPreference.objects.filter(user=user))
    raters = list(Rater.objects.filter(user=user))
    for rater in raters:
        rater.name = f"erased-clinician-{rater.pk}"
        rater.save(update_fields=["name"])
    removed["clinician names replaced"] = len(raters)
    user.username = f"erased-{user.pk}"
    user.first_name = user.last_name = user.email = ""
    user.is_active = False
    user.set_unusable_password()  # and the session hash changes: its sessions end
    user.save()
    return ErasureRecord.objects.create(
        account_id=user.pk,
        erased_by=actor,
        reason=reason,
        removed={k: v for k, v in removed.items() if v},
    )


class StudyPurgeError(ValueError):
    """A purge that cannot be done; the message says why. Nothing was deleted."""


@dataclass(frozen=True)
class StudyPurge:
    """What a purge deleted (or, on a dry run, would delete), by model: counts."""

    study_id: int
    study_name: str
    removed: dict[str, int]
    record: StudyPurgeRecord | None  # None on a dry run


def study_purge(*, name: str, actor=None, reason: str = "", dry_run: bool = False) -> StudyPurge:
    """Delete the study called `name` entirely, in one transaction: its ratings and their scores
    and change logs, label annotations, assignments and their items, judge and generation runs
    with their items and batches, consent texts and records, conversations and responses,
    samples, memberships, training outcomes, study codes, jobs (and, once committed, their
    files), webhooks limited to it, e-mail records; then the judge raters
    that rated nothing anywhere else. Clinician raters, responders and the rubric are shared
    with other studies and stay, and so do the export log's entries (the record of data that
    left), with their study cleared. Recorded in `StudyPurgeRecord` (name, number, counts).

    With `dry_run` everything is deleted inside the transaction and then rolled back, so the
    counts are exactly what a real purge would delete and nothing changes. Ratings, assignment
    items, run items and consent records protect what they point at, so children go first; if
    anything fails, the transaction leaves the study whole.
    """
    from analysis.models import ExportLog, Job
    from annotation.models import (
        Assignment,
        ConsentRecord,
        Conversation,
        LabelAnnotation,
        Rater,
        Rating,
        Study,
    )
    from judging.models import Run

    removed: Counter[str] = Counter()

    def gone(queryset) -> None:
        removed.update({label: n for label, n in queryset.delete()[1].items() if n})

    with transaction.atomic():
        study = Study.objects.select_for_update().filter(name=name).first()
        if study is None:
            raise StudyPurgeError(f"no study named {name!r}")
        study_id, study_name = study.pk, study.name
        # Three queries rather than one join over all three: a judge's rows multiply otherwise.
        judge = Q(rater__kind=Rater.Kind.JUDGE)
        judges = (
            set(
                Rating.objects.filter(judge, response__conversation__study=study)
                .values_list("rater_id", flat=True)
                .distinct()
            )
            | set(
                LabelAnnotation.objects.filter(judge, conversation__study=study)
                .values_list("rater_id", flat=True)
                .distinct()
            )
            | set(Run.objects.filter(judge, study=study).values_list("rater_id", flat=True))
        )
        gone(Rating.objects.filter(Q(response__conversation__study=study) | Q(run__study=study)))
        gone(LabelAnnotation.objects.filter(Q(conversation__study=study) | Q(run__study=study)))
        gone(Assignment.objects.filter(conversation__study=study))
        gone(Run.objects.filter(study=study))
        gone(ConsentRecord.objects.filter(consent_text__study=study))
        jobs = Job.objects.filter(study=study)
        files = [
            (field.storage, field.name)
            for job in jobs
            for field in (job.input_file, job.result_file)
            if field.name
        ]
        gone(jobs)
        # The export log is the record of data that left the platform: who took which table
        # and when. The copies outlive the study, so the entries stay, their study cleared.
        kept = ExportLog.objects.filter(study=study).update(study=None)
        if kept:
            removed["analysis.ExportLog (kept, study cleared)"] = kept
        gone(Conversation.objects.filter(study=study))
        gone(Study.objects.filter(pk=study_id))  # and every row that cascades from it
        for rater_id in sorted(judges):
            try:
                # A judge that still rated or ran anywhere else is protected by those rows and
                # stays; the savepoint keeps that refusal from spoiling the transaction.
                with transaction.atomic():
                    gone(Rater.objects.filter(pk=rater_id))
            except ProtectedError:
                continue
        counts = dict(sorted(removed.items()))
        if dry_run:
            transaction.set_rollback(True)
            return StudyPurge(study_id, study_name, counts, record=None)
        record = StudyPurgeRecord.objects.create(
            study_id=study_id,
            study_name=study_name,
            purged_by=actor,
            reason=reason,
            removed=counts,
        )

        # Files are not transactional: they go only once the deletion is committed.
        def files_delete() -> None:
            for storage, path in files:
                storage.delete(path)

        transaction.on_commit(files_delete)
    return StudyPurge(study_id, study_name, counts, record=record)
