"""Clinicians' study codes (C01, C02, …): given when a clinician joins a study.

A clinician joins a study when they become a clinician member of its team (annotation.membership),
when they are given a conversation of it (an assignment, practice included) and when an import
stores their ratings in it. Each of those writes calls `rater_codes_assign` in its own
transaction, so whatever reads the study's data later (the dashboards, exports, the API, a
release) finds every clinician coded and only reads. LLM judges get no code: they keep their
names, since they are what is being studied.

A module of its own beside annotation.membership, not one of annotation.services: membership
calls it, and the services import membership.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable

from django.db import transaction

from .models import Rater, RaterCode, Study


def code_for(*, number: int) -> str:
    """The code of the `number`-th clinician of a study: C01, C02, …, C100."""
    return f"C{number:02d}"


def rater_codes_assign(*, study_id: int, rater_ids: Iterable[int]) -> None:
    """Give each clinician among `rater_ids` a code in study `study_id` unless they have one.

    Idempotent, and one query when everyone has a code already (the common case: a clinician's
    next assignment). Otherwise the study row is locked while numbering, so two joins at once
    never take the same number; the newcomers take the numbers after the study's highest, in a
    random order, so a code does not tell who of them joined, was created or rated first. A code
    once given never changes."""
    wanted = set(
        Rater.objects.filter(pk__in=rater_ids, kind=Rater.Kind.CLINICIAN)
        .exclude(codes__study_id=study_id)
        .values_list("pk", flat=True)
    )
    if wanted:
        _numbered(study_id=study_id, rater_ids=wanted)


@transaction.atomic
def _numbered(*, study_id: int, rater_ids: set[int]) -> None:
    Study.objects.select_for_update().filter(pk=study_id).values_list("pk", flat=True).first()
    # Read again under the lock: a concurrent join may have coded some of them meanwhile.
    existing = dict(RaterCode.objects.filter(study_id=study_id).values_list("rater_id", "number"))
    missing = [r for r in sorted(rater_ids) if r not in existing]
    secrets.SystemRandom().shuffle(missing)
    start = max(existing.values(), default=0)
    RaterCode.objects.bulk_create(
        RaterCode(study_id=study_id, rater_id=r, number=start + i, code=code_for(number=start + i))
        for i, r in enumerate(missing, start=1)
    )
