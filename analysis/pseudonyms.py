"""How clinicians appear in data that leaves for researchers: as a code per study (C01, C02, …).

Analysis needs to know that two scores came from the same clinician, not who that clinician is.
So every export, API response and dashboard shows a clinician as their study code
(analysis.models.RaterCode), dates instead of exact timestamps, and submitted work only. LLM
judges keep their names: they are what is being studied.

*Identified* access — real names, exact timestamps, drafts — is an explicit request
(``?identified=1``, ``export_ratings --identified``) that only admins and users an admin gave the
``analysis.view_clinician_identities`` permission may make, and each such request writes an
ExportLog row (who, when, what, parameters).

Codes are handed out lazily, the first time a study's data is shown: ``rater_codes_ensure``
gives every clinician of the study a code at once (in a random order), under a lock on the
study row, so concurrent first requests agree and the numbering does not depend on which page
was opened first.
"""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.db import transaction

from accounts.roles import is_admin
from analysis.models import RaterCode
from annotation.models import Assignment, LabelAnnotation, Rater, Rating, Study

IDENTITIES_PERMISSION = "analysis.view_clinician_identities"
IDENTIFIED_REFUSED = (
    "clinicians' names, drafts and exact timestamps are for admins and for users an admin has "
    "given the 'view clinician identities' permission"
)


def code_for(number: int) -> str:
    return f"C{number:02d}"


def can_see_identities(user: User | AnonymousUser) -> bool:
    return bool(user and user.is_authenticated) and (
        is_admin(user) or user.has_perm(IDENTITIES_PERMISSION)
    )


def identified_requested(raw: str | None) -> bool:
    return (raw or "").strip().lower() in {"1", "true", "yes", "on"}


def identified_check(*, user: User | AnonymousUser, identified: bool) -> None:
    """Refuse identified access to those not allowed it (PermissionDenied → 403)."""
    if identified and not can_see_identities(user):
        raise PermissionDenied(IDENTIFIED_REFUSED)


def rater_codes(*, study_id: int) -> dict[int, str]:
    """Rater id → code of the study's clinicians that already have one."""
    return dict(RaterCode.objects.filter(study_id=study_id).values_list("rater_id", "code"))


def _clinicians_of(study_id: int) -> set[int]:
    clinician = Rater.Kind.CLINICIAN
    ids: set[int] = set()
    # Three small distinct queries rather than one OR across three joins (a cross product).
    for queryset in (
        Rating.objects.filter(response__conversation__study_id=study_id, rater__kind=clinician),
        LabelAnnotation.objects.filter(conversation__study_id=study_id, rater__kind=clinician),
        Assignment.objects.filter(conversation__study_id=study_id, rater__kind=clinician),
    ):
        ids.update(queryset.values_list("rater_id", flat=True).distinct())
    return ids


@transaction.atomic
def rater_codes_ensure(*, study_id: int, rater_ids: tuple[int, ...] = ()) -> dict[int, str]:
    """Give a code to every clinician of the study (and to `rater_ids`) that has none yet;
    return rater id → code. Idempotent; holds a lock on the study row while numbering."""
    Study.objects.select_for_update().filter(pk=study_id).values_list("pk", flat=True).first()
    existing = dict(RaterCode.objects.filter(study_id=study_id).values_list("rater_id", "number"))
    wanted = _clinicians_of(study_id) | set(rater_ids)
    missing = [r for r in sorted(wanted) if r not in existing]
    if missing:
        # A random order, so the numbers reveal nothing (not who was created or rated first).
        secrets.SystemRandom().shuffle(missing)
        start = max(existing.values(), default=0)
        RaterCode.objects.bulk_create(
            RaterCode(study_id=study_id, rater_id=r, number=start + i, code=code_for(start + i))
            for i, r in enumerate(missing, start=1)
        )
    return rater_codes(study_id=study_id)


class RaterLabels:
    """Names raters in outgoing data: judges by name; clinicians by their study code, or by
    name when `identified`. Codes are read once per study and created on a miss."""

    def __init__(self, *, identified: bool = False) -> None:
        self.identified = identified
        self._codes: dict[int, dict[int, str]] = {}

    def codes(self, study_id: int) -> dict[int, str]:
        """The study's codes as stored (one query per study)."""
        if study_id not in self._codes:
            self._codes[study_id] = rater_codes(study_id=study_id)
        return self._codes[study_id]

    def ensure(self, study_id: int) -> None:
        """Code every clinician of the study now (before a query that sorts by code)."""
        self._codes[study_id] = rater_codes_ensure(study_id=study_id)

    def label(self, *, study_id: int, rater_id: int, name: str, kind: str) -> str:
        if self.identified or kind != Rater.Kind.CLINICIAN:
            return name
        codes = self.codes(study_id)
        if rater_id not in codes:  # a clinician who started rating since the codes were read
            codes = self._codes[study_id] = rater_codes_ensure(
                study_id=study_id, rater_ids=(rater_id,)
            )
        return codes[rater_id]

    def timestamp(self, value: datetime | None) -> Any:
        """Exact time when identified; otherwise the day only (UTC), which is enough to study
        drift and does not show how long a clinician spent on each response."""
        if value is None or self.identified:
            return value
        return value.date() if isinstance(value, datetime) else value
