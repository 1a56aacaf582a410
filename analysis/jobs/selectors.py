"""Reads of jobs: always through their owner, so a job's id alone reaches nothing."""

from __future__ import annotations

from uuid import UUID

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q, QuerySet
from django.http import Http404

from analysis.models import Job
from annotation.membership import studies_for


def jobs_of(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Job]:
    """The person's jobs, newest first; a study's jobs only while they still read the study
    (a researcher taken off a study no longer downloads its release)."""
    return (
        Job.objects.filter(owner_id=user.pk)
        .filter(Q(study__isnull=True) | Q(study__in=studies_for(user=user).values("pk")))
        .select_related("study")
        .order_by("-created_at")
    )


def job_get_for_user(*, user: AbstractBaseUser | AnonymousUser, job_id: str | UUID) -> Job:
    """The person's job, or 404 (someone else's job is not found, not forbidden; nor is an id
    that is no UUID)."""
    try:
        key = job_id if isinstance(job_id, UUID) else UUID(job_id)
    except ValueError:
        raise Http404("No such job.") from None
    job = jobs_of(user=user).filter(pk=key).first()
    if job is None:
        raise Http404("No such job.")
    return job
