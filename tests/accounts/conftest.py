import pytest
from django.core.cache import cache

from annotation.roles import CLINICIAN, RESEARCHER, role_add


@pytest.fixture(autouse=True)
def _fresh_token_throttle():
    """Failed-token counts live in the (Redis) cache, which outlives a test's transaction."""
    from accounts.authentication import TokenFailureThrottle

    key = TokenFailureThrottle.cache_format % {
        "scope": TokenFailureThrottle.scope,
        "ident": "127.0.0.1",
    }
    cache.delete(key)
    yield
    cache.delete(key)


@pytest.fixture
def researcher(django_user_model):
    user = django_user_model.objects.create_user("rhea", password="pw-rhea-long-enough")
    role_add(user=user, role=RESEARCHER)
    return user


@pytest.fixture
def clinician(django_user_model):
    user = django_user_model.objects.create_user("cleo", password="pw-cleo-long-enough")
    role_add(user=user, role=CLINICIAN)
    return user
