"""Lookups the analysis commands share, kept apart from the statistics so that a command which
only exports does not import SciPy and the report code at start-up."""

from __future__ import annotations

from django.core.management.base import CommandError

from annotation.models import Study


def study_get_or_error(name: str) -> Study:
    study = Study.objects.filter(name=name).select_related("rubric").first()
    if study is None:
        known = ", ".join(Study.objects.values_list("name", flat=True)[:10]) or "none"
        raise CommandError(f"no study named {name!r} (studies: {known})")
    return study
