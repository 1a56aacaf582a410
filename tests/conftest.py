"""Shared fixtures. Tests run on real PostgreSQL (bin/test sets DATABASE_URL)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection, transaction

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from annotation.models import Study
    from tests.celery_workers import Worker

SHARED = Path(os.environ.get("MENTALBENCH_SHARED", Path(__file__).resolve().parents[2] / "shared"))
MENTALALIGN = SHARED / "data" / "mentalalign70k"
REFERENCE = SHARED / "reference"
MENTALALIGN_STUDY = "MentalAlign-70k (test)"


def worker_redis_url(url: str) -> str:
    """This test process's own Redis database in place of the configured one.

    bin/test runs the tests in parallel processes (pytest-xdist workers gw0, gw1, …) on one Redis,
    and each uses three databases: REDIS_URL's (cache, broker), TEST_WORKER_REDIS_URL's (Celery
    worker subprocesses) and TEST_REDIS_URL's (rate limiters), which tests flush. Worker gwN
    shifts each database number by 3·N (mod Redis's 16), so no two workers share a key or a
    FLUSHDB; gw0 and a run without xdist use the configured ones.
    """
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    if worker == 0:
        return url
    if worker >= 16 // 3:  # a sixth worker would come back to gw0's databases
        raise pytest.UsageError(f"at most {16 // 3} test workers share one Redis (bin/test -n)")
    parts = urlsplit(url)
    db = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{(db + 3 * worker) % 16}"))


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.hasplugin("django"):
        return  # pure tests (analysis statistics, providers) run with -p no:django
    if settings.REDIS_URL and worker_redis_url(settings.REDIS_URL) != settings.REDIS_URL:
        # Settings were read before any conftest ran: point the cache, the broker and the
        # subprocesses tests start (which inherit the environment) at this worker's database.
        from mentalbench.celery import app

        url = worker_redis_url(settings.REDIS_URL)
        os.environ["REDIS_URL"] = settings.REDIS_URL = settings.CELERY_BROKER_URL = url
        settings.CACHES["default"]["LOCATION"] = url
        app.conf.broker_url = url
    # Django's default hasher costs a few hundred milliseconds a password on purpose; tests that
    # make accounts, sign in or count failed sign-ins would spend most of their time in it.
    # What they test (who may sign in, lock-outs, resets) is the same with a cheap hasher; the
    # deployment's hasher is Django's default (mentalbench/settings.py leaves it alone).
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Static files come from the source folders in tests (live_server serves them through the
    # finders). A staticfiles/ that `bin/up` collected in the checkout holds a manifest, which
    # would give pages hashed names the test server then answers 404: every chart stayed
    # undrawn. An empty folder of the test run's own keeps the manifest out.
    settings.STATIC_ROOT = Path(tempfile.mkdtemp(prefix="mentalbench-test-static-"))
    # Job results and uploads go to a folder of the run's own, shared with the Celery workers
    # tests start (they inherit the environment), never into the checkout.
    media = tempfile.mkdtemp(prefix="mentalbench-test-media-")
    settings.MEDIA_ROOT = Path(media)
    os.environ["MEDIA_ROOT"] = media
    # force_login of staff or an admin-group member signs in with a second factor, as the
    # platform requires of them (tests/second_factor.py).
    from django.test import Client

    from tests.second_factor import force_login_with_second_factor

    Client.force_login = force_login_with_second_factor  # type: ignore[method-assign]
    engine = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" not in engine and not os.environ.get("MENTALBENCH_ALLOW_SQLITE_TESTS"):
        raise pytest.UsageError(
            f"the tests need PostgreSQL, but the database engine is {engine}: run bin/test, or set "
            "DATABASE_URL=postgres://postgres@127.0.0.1:5432/mentalbench (the tests marked "
            "`portable` also run on SQLite: MENTALBENCH_ALLOW_SQLITE_TESTS=1 pytest -m portable)"
        )


# Endpoints store API keys encrypted, so every test gets an encryption key (a fixed one, for
# tests only). It goes into the environment too: worker subprocesses must decrypt what the test
# process stored.
TEST_ENCRYPTION_KEY = "JW-EH4jSIWW4IXMVVDkF_I7Uat-Y_1_EVJ0yAAWJr9c="


@pytest.fixture(autouse=True)
def _encryption_key(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    if not request.config.pluginmanager.hasplugin("django"):
        yield
        return
    from django.test import override_settings

    monkeypatch.setenv("MENTALBENCH_ENCRYPTION_KEYS", TEST_ENCRYPTION_KEY)
    with override_settings(MENTALBENCH_ENCRYPTION_KEYS=[TEST_ENCRYPTION_KEY]):
        yield


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    request: pytest.FixtureRequest, django_db_modify_db_settings_parallel_suffix
) -> None:
    """On SQLite, test on a file beside the configured one, as the embedded default runs.

    Django's default SQLite test database is a shared-cache in-memory one, whose table locks
    fail at once ("database table is locked") instead of waiting out the busy timeout: the
    concurrent-save tests would test that, not the settings the platform runs with. One file
    per xdist worker (pytest-django suffixes only PostgreSQL's names, test_<name>_gw0, …).
    """
    from django.db import connections

    db = connections["default"].settings_dict
    if db["ENGINE"].endswith("sqlite3") and not db["TEST"].get("NAME"):
        name = Path(db["NAME"])
        worker = getattr(request.config, "workerinput", {}).get("workerid")
        stem = f"test_{name.stem}_{worker}" if worker else f"test_{name.stem}"
        db["TEST"]["NAME"] = str(name.with_name(stem + name.suffix))


@pytest.fixture(scope="session")
def django_db_setup(
    request: pytest.FixtureRequest,
    django_test_environment,
    django_db_blocker,
    django_db_use_migrations: bool,
    django_db_keepdb: bool,
    django_db_createdb: bool,
    django_db_modify_db_settings,
) -> Iterator[None]:
    """This process's test database: a copy of a migrated template (tests/databases.py) rather
    than a database migrated for each process. `--reuse-db`, `--create-db` and `--nomigrations`
    keep pytest-django's own way (a database migrated here, kept or not)."""
    from django.test import TransactionTestCase
    from django.test.utils import setup_databases, teardown_databases

    from tests import databases

    verbosity = request.config.option.verbose
    keepdb = django_db_keepdb and not django_db_createdb
    with django_db_blocker.unblock():
        if django_db_use_migrations and not django_db_keepdb and not django_db_createdb:
            cache = getattr(request.config, "cache", None)
            templates = (
                cache.mkdir("test-databases")
                if cache is not None
                else Path(tempfile.gettempdir()) / f"mentalbench-test-databases-{os.getuid()}"
            )
            db_cfg = databases.setup(verbosity=verbosity, templates=templates)
        else:
            if not django_db_use_migrations:
                from pytest_django.fixtures import _disable_migrations

                _disable_migrations()
            db_cfg = setup_databases(verbosity=verbosity, interactive=False, keepdb=keepdb)
        databases.seeded_remember(connection)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            TransactionTestCase,
            "_fixture_teardown",
            transactional_teardown(stock=TransactionTestCase._fixture_teardown),
        )
        yield
    if not django_db_keepdb:
        with django_db_blocker.unblock():
            teardown_databases(db_cfg, verbosity=verbosity)


def transactional_teardown(*, stock: Callable) -> Callable:
    """What ends a transactional test (live_server, transaction=True): tests/databases.py's
    flush, which deletes what the test wrote, in place of Django's, which truncates every table
    and makes the content types and permissions again; Django's (`stock`) where that one cannot
    tell."""
    from django.db import connections

    from tests import databases

    def teardown(self) -> None:
        if self.available_apps is None and not self.serialized_rollback:
            names = self._databases_names(include_mirrors=False)
            if all(databases.flush(connections[name]) for name in names):
                return
        stock(self)
        for name in self._databases_names(include_mirrors=False):
            databases.seeded_remember(connections[name])

    return teardown


def require_shared() -> Path:
    if not (MENTALALIGN / "Human_judge.xlsx").exists():
        if os.environ.get("CI"):
            pytest.fail(f"CI must have the shared data, but {MENTALALIGN} is missing")
        pytest.skip(
            f"the released MentalAlign-70k workbooks are not at {MENTALALIGN} (../shared beside "
            "the checkout, or $MENTALBENCH_SHARED); they are on the team's machines and in CI"
        )
    return MENTALALIGN


@pytest.fixture
def mentalalign_dir() -> Path:
    return require_shared()


def _import_mentalalign(directory: Path) -> None:
    call_command(
        "import_mentalalign",
        "--study",
        MENTALALIGN_STUDY,
        "--human",
        str(directory / "Human_judge.xlsx"),
        "--judge",
        f"claude-3.7-sonnet={directory / 'claude_llm_judge.xlsx'}",
        "--judge",
        f"gpt-4o={directory / 'gpt-4o_llm_judge.xlsx'}",
        stdout=open(os.devnull, "w"),  # noqa: SIM115
    )


def mentalalign_get_or_import() -> Study:
    """The imported MentalAlign-70k study; imported again where it is missing (a transactional
    test, such as a browser test's live_server, flushes the database)."""
    from annotation.models import Study

    study = Study.objects.filter(name=MENTALALIGN_STUDY).first()
    if study is None:
        _import_mentalalign(MENTALALIGN)
        study = Study.objects.get(name=MENTALALIGN_STUDY)
    return study


@pytest.fixture(scope="module")
def mentalalign_module(django_db_setup, django_db_blocker) -> Study:
    """The released workbooks imported once for a test module, inside a transaction rolled back
    at the module's end (each test runs in a savepoint within it).

    Never committed: a committed study would be seen by every later test that counts all
    conversations, and the tests would pass or fail by the order they run in.
    """
    require_shared()
    with django_db_blocker.unblock(), transaction.atomic():
        study = mentalalign_get_or_import()
        # The import's foreign keys are checked at commit (deferred). Each test's teardown asks
        # for them at once (Django's TestCase checks constraints), and PostgreSQL queues the
        # checks again after each test's savepoint rolls back: about 2 s per test for the
        # workbooks' 240k rows. Checked here, once, they leave nothing queued.
        connection.check_constraints()
        yield study
        transaction.set_rollback(True)


@pytest.fixture
def mentalalign_study(mentalalign_module, db) -> Study:
    """The MentalAlign-70k study (human + claude-3.7-sonnet + gpt-4o judges)."""
    return mentalalign_module


CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]
# Browser tests save screenshots of the pages they drive. Into a scratch directory by default:
# a test run must not rewrite tracked files. `bin/screenshots` points this at docs/screenshots to
# regenerate the documentation's images on purpose.
SCREENSHOTS = Path(
    os.environ.get("MENTALBENCH_SCREENSHOTS")
    or Path(tempfile.gettempdir()) / f"mentalbench-screenshots-{os.getuid()}"
).resolve()


@pytest.fixture(scope="module")
def chromium(django_db_setup):
    """Debian's chromium driven by Playwright (no browser download is possible here).

    Module-scoped: Playwright's sync API parks an event loop in this thread for as long as it
    runs, and while it does Django refuses database setup and asyncio.run refuses to start
    (provider and run tests use both). Closing it after each browser module clears the loop.
    Depends on django_db_setup so the test database exists before the loop starts.
    """
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("CI must run the browser tests, but /usr/bin/chromium is missing")
        pytest.skip("browser tests need Debian's chromium: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    # While the browser lives, the ORM (tests, live_server's database flush) runs in this thread
    # beside Playwright's parked loop, which Django's async-unsafe guard would refuse.
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium, live_server):
    """A fresh browser context per test; fails if the page broke its Content-Security-Policy.

    The policy admits no inline script or eval, so an inline handler added to a template would
    silently stop working in the browser: every browser test doubles as the check that none was.
    """
    context = chromium.new_context(
        base_url=live_server.url, viewport={"width": 1280, "height": 900}
    )
    browser_page = context.new_page()
    violations: list[str] = []
    browser_page.on(
        "console",
        lambda message: (
            violations.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    yield browser_page
    context.close()
    assert not violations, f"the page broke its Content-Security-Policy: {violations}"


@pytest.fixture(autouse=True)
def _fresh_access_counters(request):
    """Every test starts with no failed-API-token count for the test client's address, none of
    allauth's rate-limit history ("forgot password": 5 a minute per address) and no TOTP code
    remembered as used by allauth: they live in the Redis cache, which outlives a test's
    transaction (and a test run: the next run's accounts get the same ids). Failed sign-ins are
    counted in the database by django-axes, so the test's rollback already clears them."""
    if not request.config.pluginmanager.hasplugin("django"):
        yield
        return
    from django.core.cache import cache

    from accounts.authentication import TokenFailureThrottle

    key = TokenFailureThrottle.cache_format % {
        "scope": TokenFailureThrottle.scope,
        "ident": "127.0.0.1",
    }
    cache.delete(key)
    if settings.REDIS_URL:
        import redis

        client = redis.Redis.from_url(settings.REDIS_URL)
        for pattern in ("*allauth:rl:*", "*allauth.mfa.totp.used*"):
            for stale in client.scan_iter(match=pattern):
                client.delete(stale)
    yield
    cache.delete(key)


# Users by role, one definition each. Named so as not to shadow pytest-django's `admin_user` /
# `admin_client` (a superuser), which tests use for Django's own admin.
@pytest.fixture
def researcher(db, django_user_model):
    """A user in the researcher group (one definition for every test directory)."""
    from accounts.roles import RESEARCHER, role_add

    user = django_user_model.objects.create_user("rhea", password="pw-rhea-long-enough")
    role_add(user=user, role=RESEARCHER)
    return user


@pytest.fixture
def admin_member(db, django_user_model):
    """A member of the *admin* group (not staff): the platform's study administrator, with the
    authenticator app the platform requires of admins."""
    from accounts.roles import ADMIN, role_add
    from tests.second_factor import totp_enrol

    user = django_user_model.objects.create_user(username="adam", password="pw")
    role_add(user=user, role=ADMIN)
    totp_enrol(user)  # the platform lets admins in (sessions and API tokens) only with one
    return user


@pytest.fixture
def admin_member_client(client, admin_member):
    client.force_login(admin_member)
    return client


@pytest.fixture
def staff_user(db, django_user_model):
    """A staff account with no role group, with the authenticator app the platform requires of
    staff (sessions and API tokens; tests/second_factor.py)."""
    from tests.second_factor import totp_enrol

    user = django_user_model.objects.create_user("boss", password="pw-12345678", is_staff=True)
    totp_enrol(user)
    return user


@pytest.fixture
def staff_client(client, staff_user):
    client.force_login(staff_user)
    return client


# ------------------------------------------------------------------------------ Celery workers


@pytest.fixture
def celery_worker_factory(transactional_db, tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """Start real workers; the test process sends its tasks to the same Redis db."""
    from mentalbench.celery import app
    from tests.celery_workers import WORKER_REDIS_URL, Worker, flush

    flush(WORKER_REDIS_URL)
    database = settings.DATABASES["default"]
    env = {
        **os.environ,
        "DATABASE_URL": (
            f"postgres://{database['USER'] or 'postgres'}@{database['HOST'] or '127.0.0.1'}:"
            f"{database['PORT'] or 5432}/{database['NAME']}"
        ),
        "REDIS_URL": WORKER_REDIS_URL,
        "JUDGING_RATELIMIT_REDIS_URL": WORKER_REDIS_URL,
        "JUDGING_LEASE_SECONDS": "4",
        "JUDGING_SWEEP_SECONDS": "1",
        "DB_CONN_MAX_AGE": "0",
        "PYTHONUNBUFFERED": "1",
    }
    saved = app.conf.broker_url
    app.conf.broker_url = WORKER_REDIS_URL
    app._pool = None  # connection pools are built from broker_url on first use
    app.amqp._producer_pool = None
    workers: list[Worker] = []

    def start(
        log_name: str = "worker.log",
        *,
        concurrency: int = 2,
        beat: bool = False,
        queues: str = "",
        idle_scheduling: bool = False,
    ) -> Worker:
        """A worker (of every queue unless `queues` names some), or beat.

        Deployed, the pool runs at the idle scheduling policy: it waits for every normal
        process. Here those are the other tests' CPU-bound work, and a test's timeouts would
        depend on its neighbours; the one test of the policy asks for it (`idle_scheduling`)."""
        worker_env = {**env, "WORKER_IDLE_SCHEDULING": "1" if idle_scheduling else "0"}
        worker = Worker(
            worker_env, tmp_path / log_name, concurrency=concurrency, beat=beat, queues=queues
        ).start()
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.stop()
    app.conf.broker_url = saved
    app._pool = None
    app.amqp._producer_pool = None
    flush(WORKER_REDIS_URL)
