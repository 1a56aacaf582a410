"""Drawing the clinicians' sample of a study (a stored design, see models.ClinicianSample)."""

from __future__ import annotations

import random
from collections import defaultdict

from django.contrib.auth.models import User
from django.db import transaction

from annotation.models import ClinicianSample, Conversation, Study

NO_CONDITION = "(no condition)"


def _stratum(conditions: object) -> str:
    # The first condition is the conversation's primary one (MentalBench-100k lists up to three).
    if isinstance(conditions, list) and conditions:
        return str(conditions[0])
    return NO_CONDITION


def _allocate(sizes: dict[str, int], total: int) -> dict[str, int]:
    """Proportional allocation with largest remainders: every stratum gets its share of
    ``total`` rounded so the shares add up to ``total`` (ties by stratum name)."""
    population = sum(sizes.values())
    exact = {name: total * size / population for name, size in sizes.items()}
    shares = {name: int(value) for name, value in exact.items()}
    left = total - sum(shares.values())
    by_remainder = sorted(exact, key=lambda name: (-(exact[name] - shares[name]), name))
    for name in by_remainder[:left]:
        shares[name] += 1
    return shares


@transaction.atomic
def clinician_sample_draw(
    *,
    study: Study,
    size: int,
    method: str = ClinicianSample.Method.UNIFORM,
    seed: int | None = None,
    user: User | None = None,
) -> ClinicianSample:
    """Draw ``size`` of the study's conversations (practice ones excluded) for clinicians to
    rate and store them with the seed, so the draw can be re-derived and audited.

    ``uniform``: a simple random sample. ``stratified``: the same share of every primary
    condition (proportional allocation), so each conversation still has the same chance of
    being drawn and the sample mean stays an unbiased estimate of the study mean.
    """
    if method not in ClinicianSample.Method.values:
        raise ValueError(
            f"method must be one of {', '.join(ClinicianSample.Method.values)}, got {method!r}"
        )
    rows = list(
        Conversation.objects.filter(study=study, practice=False)
        .order_by("external_id")
        .values_list("pk", "conditions")
    )
    if not rows:
        raise ValueError(f"study {study.name!r} has no conversation to sample")
    if not 1 <= size <= len(rows):
        raise ValueError(
            f"the sample size must be between 1 and the study's {len(rows)} conversations, "
            f"got {size}"
        )
    if seed is None:
        seed = random.SystemRandom().getrandbits(63)
    rng = random.Random(seed)
    if method == ClinicianSample.Method.UNIFORM:
        chosen = rng.sample([pk for pk, _ in rows], size)
    else:
        strata: dict[str, list[int]] = defaultdict(list)
        for pk, conditions in rows:
            strata[_stratum(conditions)].append(pk)
        if len(strata) < 2:
            # One stratum is a uniform draw under another name: the stored design would claim
            # a stratification that never happened.
            only = next(iter(strata))
            raise ValueError(
                "stratified sampling needs at least two primary conditions to stratify on, but "
                + (
                    "none of the study's conversations has a condition"
                    if only == NO_CONDITION
                    else f"every conversation's primary condition is {only!r}"
                )
                + ": draw a uniform sample instead"
            )
        shares = _allocate({name: len(pks) for name, pks in strata.items()}, size)
        chosen = [pk for name in sorted(strata) for pk in rng.sample(strata[name], shares[name])]
    sample = ClinicianSample.objects.create(
        study=study, method=method, size=size, population=len(rows), seed=seed, created_by=user
    )
    sample.conversations.set(chosen)
    return sample
