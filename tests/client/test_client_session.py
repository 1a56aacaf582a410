"""A researcher's session with the Python client against a running server and a real Celery
worker: list studies, read ratings into pandas (as many rows as the CSV export), start a release
job, wait with progress, download, verify SHA256SUMS; errors come back as ApiError."""

from __future__ import annotations

import pandas as pd
import pytest
from mentalbench_client import ApiError, Client, Job, checksums_verify

from accounts.services import api_token_create
from analysis.models import Job as JobRow
from tests.factories import small_study_make

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def session(live_server, researcher) -> Client:
    _, token = api_token_create(user=researcher, days=1)
    return Client(live_server.url, token=token, timeout=30)


def test_a_researchers_session(session, celery_worker_factory, tmp_path, settings):
    small = small_study_make()
    celery_worker_factory()

    studies = session.studies()
    assert [s.name for s in studies] == [small.study.name]
    study = studies[0]
    assert session.study(study.id).attributes == study.attributes

    ratings = session.ratings(study.id)
    assert isinstance(ratings, pd.DataFrame)
    assert len(ratings) == small.n_complete_scores
    assert {"rater", "attribute", "score"} <= set(ratings.columns)
    # Clinicians as study codes, as everywhere researchers read data.
    assert not set(ratings["rater"]) & {r.name for r in small.clinicians}

    report = session.report(study.id, "reliability", bootstrap=50)
    assert {"judge", "attribute", "icc_c1"} <= set(report.columns)

    seen: list[Job] = []
    out = session.release(study.id, tmp_path / "release", progress=seen.append, timeout=120)
    assert checksums_verify(out) == []
    assert (out / "SHA256SUMS").exists() and (out / "datasheet.md").exists()
    assert seen[-1].state == "done" and seen[-1].fraction == 1.0
    # The same request again is the same job, already done.
    again = session.start_release(study.id)
    assert again.id == seen[-1].id and again.state == "done"
    assert [j.id for j in session.jobs()] == [again.id]
    assert JobRow.objects.count() == 1

    # More resamples than the default: the server leaves them to a job, the client waits for it
    # and reads the report the job put in the cache. The test's worker has a Redis database of
    # its own (tests/celery_workers.py); the server reads the cache there, as a deployment's web
    # and workers share one.
    from tests.celery_workers import WORKER_REDIS_URL

    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": WORKER_REDIS_URL,
        }
    }
    heard: list[Job] = []
    more = session.report(
        study.id, "reliability", bootstrap=2000, timeout=120, progress=heard.append
    )
    assert {"judge", "attribute", "icc_c1"} <= set(more.columns)
    assert heard[-1].kind == "report" and heard[-1].state == "done"
    assert JobRow.objects.filter(kind="report").count() == 1


def test_kappa_f1_through_the_client_and_errors_as_api_errors(
    session, celery_worker_factory, tmp_path
):
    celery_worker_factory()
    predictions = tmp_path / "preds.csv"
    predictions.write_text("true,predicted\na,a\na,a\na,b\nb,b\n")
    job = session.wait(session.start_kappa_f1(predictions, n_sim=100), timeout=60)
    assert job.result is not None and job.result["f1_random"] == pytest.approx(0.625)

    with pytest.raises(ApiError) as refused:
        session.study(10**6)
    assert refused.value.status == 404
    bad = Client(session.api.removesuffix("/api/"), token="not-a-token")
    with pytest.raises(ApiError) as unauthenticated:
        bad.studies()
    assert unauthenticated.value.status == 401
