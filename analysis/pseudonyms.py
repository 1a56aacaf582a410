"""How clinicians appear in data that leaves for researchers: as a code per study (C01, C02, …).

Analysis needs to know that two scores came from the same clinician, not who that clinician is.
So every export, API response and dashboard shows a clinician as their study code
(annotation.models.RaterCode), dates instead of exact timestamps, and submitted work only. LLM
judges keep their names: they are what is being studied.

*Identified* access — real names, exact timestamps, drafts — is an explicit request
(``?identified=1``, ``export_ratings --identified``) that only admins and users an admin gave the
``analysis.view_clinician_identities`` permission may make, and each such request writes an
ExportLog row (who, when, what, parameters).

Codes are given when a clinician joins a study (annotation.rater_codes: team membership, an
assignment, an import of their ratings), never here: everything in this module, and whatever
shows a study's data, only reads them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied

from accounts.roles import is_admin
from annotation.models import Rater, RaterCode

IDENTITIES_PERMISSION = "analysis.view_clinician_identities"
IDENTIFIED_REFUSED = (
    "clinicians' names, drafts and exact timestamps are for admins and for users an admin has "
    "given the 'view clinician identities' permission"
)


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
    """Rater id → code of the study's clinicians (every clinician who joined it has one)."""
    return dict(RaterCode.objects.filter(study_id=study_id).values_list("rater_id", "code"))


class UncodedClinician(LookupError):
    """A clinician's work in a study whose clinicians should all have codes but one has none:
    a write path that made them part of the study without annotation.rater_codes. Refused
    rather than shown under their name, or under a made-up code that another export would not
    repeat."""

    def __init__(self, *, study_id: int, rater_id: int) -> None:
        super().__init__(
            f"clinician rater {rater_id} has no study code in study {study_id}: a clinician "
            "gets one on joining a study (annotation.rater_codes.rater_codes_assign)"
        )


class RaterLabels:
    """Names raters in outgoing data: judges by name; clinicians by their study code, or by
    name when `identified`. Codes are read once per study, never written (UncodedClinician on
    a miss)."""

    def __init__(self, *, identified: bool = False) -> None:
        self.identified = identified
        self._codes: dict[int, dict[int, str]] = {}

    def codes(self, study_id: int) -> dict[int, str]:
        """The study's codes as stored (one query per study)."""
        if study_id not in self._codes:
            self._codes[study_id] = rater_codes(study_id=study_id)
        return self._codes[study_id]

    def label(self, *, study_id: int, rater_id: int, name: str, kind: str) -> str:
        if self.identified or kind != Rater.Kind.CLINICIAN:
            return name
        codes = self.codes(study_id)
        if rater_id not in codes:
            # Joined since the codes were read (their code committed with their first work)?
            codes = self._codes[study_id] = rater_codes(study_id=study_id)
        if rater_id not in codes:
            raise UncodedClinician(study_id=study_id, rater_id=rater_id)
        return codes[rater_id]

    def timestamp(self, value: datetime | None) -> Any:
        """Exact time when identified; otherwise the day only (UTC), which is enough to study
        drift and does not show how long a clinician spent on each response."""
        if value is None or self.identified:
            return value
        return value.date() if isinstance(value, datetime) else value
