import pytest
import redis
from django.conf import settings

from annotation.roles import CLINICIAN
from tests.factories import user_make


@pytest.fixture(autouse=True)
def _fresh_allauth_rate_limits():
    """Every test starts with none of allauth's rate-limit history ("forgot password": 5 a
    minute per address): it lives in the Redis cache, which outlives a test's transaction, so
    one test's requests would answer another's with 429."""
    if settings.REDIS_URL:
        client = redis.Redis.from_url(settings.REDIS_URL)
        for key in client.scan_iter(match="*allauth:rl:*"):
            client.delete(key)
    yield


@pytest.fixture
def celery_eager():
    """Celery tasks run inside whoever sends them (the forgot-password e-mail is sent by a task):
    for tests of what the e-mail holds rather than of when it is sent."""
    from mentalbench.celery import app

    saved = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = saved


@pytest.fixture
def clinician(django_user_model):
    return user_make(username="cleo", password="pw-cleo-long-enough", role=CLINICIAN)
