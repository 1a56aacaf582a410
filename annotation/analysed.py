"""Which ratings count as study data: the one rule every analysis, report, API list and export
of real ratings applies.

Two kinds of clinician rating are kept out of them by default:
- practice ratings (on a study's practice conversations): training, compared with reference
  scores, never data;
- repeat ratings (test-retest, `repeat` ≥ 1 with no run): a second look at a conversation the
  clinician rated before, kept apart so that no response counts one clinician twice.
A researcher may choose to analyse the latest rating instead: a clinician's repeat then stands
in for their first rating of the same response. Judge ratings (with a run) keep every repeat:
a run's repeats are its design.
"""

from django.db.models import Exists, OuterRef, Q

FIRST = "first"
LATEST = "latest"
CLINICIAN_RATINGS = (FIRST, LATEST)


def analysed_ratings_q(prefix: str = "", *, clinician_ratings: str = FIRST) -> Q:
    """Q for the ratings that count; `prefix` ("rating__") applies it from Score."""
    from .models import Rating

    if clinician_ratings not in CLINICIAN_RATINGS:
        raise ValueError(
            f"clinician_ratings must be one of {', '.join(CLINICIAN_RATINGS)}, "
            f"not {clinician_ratings!r}"
        )
    p = prefix
    q = Q(**{f"{p}response__conversation__practice": False})
    judged = Q(**{f"{p}run__isnull": False})
    if clinician_ratings == FIRST:
        return q & (judged | Q(**{f"{p}repeat": 0}))
    # The latest complete rating of each clinician and response: a repeat where there is one.
    later = Rating.objects.filter(
        rater_id=OuterRef(f"{p}rater_id"),
        response_id=OuterRef(f"{p}response_id"),
        run__isnull=True,
        repeat__gt=OuterRef(f"{p}repeat"),
        status=Rating.Status.COMPLETE,
    )
    return q & (judged | ~Q(Exists(later)))
