"""One settings module; every knob comes from the environment (see README "Configuration").

Without DATABASE_URL the platform runs on a local SQLite file, and without REDIS_URL the Celery
broker is a local folder (kombu's filesystem transport), so a person can try it anywhere with real
background workers. With them set it uses Postgres and Redis, which is what production, the tests
and CI use.
"""

import os
from pathlib import Path
from typing import Any

import dj_database_url
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def envbool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use 1/0, true/false)")


def envint(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None


def envfloat(name: str, default: float) -> float:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number") from None


def envlist(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


DEBUG = envbool("DEBUG", False)

# --- Secret key: fails closed -------------------------------------------------------------------
# A key anyone can read (the development one, or none at all) lets anyone forge sessions and
# password-reset links. So outside DEBUG the platform refuses to start without a private key: from
# SECRET_KEY, from the file SECRET_KEY_FILE names (Docker/Kubernetes secrets), or from the random
# key `bin/up` writes once into the ignored file .secret_key for a local trial.
DEV_SECRET_KEY = "insecure-dev-key-set-SECRET_KEY-in-production"  # noqa: S105
SECRET_KEY_FILE = Path(os.environ.get("SECRET_KEY_FILE") or BASE_DIR / ".secret_key")


# Django's own deployment check asks for 50 characters and 5 distinct ones; 'abcde' * 10 and
# '0123456789' * 5 pass it. So the key's randomness is estimated too (secret_key_bits).
SECRET_KEY_MIN_LENGTH = 50
SECRET_KEY_MIN_BITS = 128


def secret_key_bits(key: str) -> float:
    """A pattern-aware estimate of the randomness in `key`, in bits: each character that
    neither continues a run of equal steps (abc, 999, 2468) nor continues a repeat of the
    (up to 16) characters before it counts log2(distinct characters in the key).

    Random keys score far above SECRET_KEY_MIN_BITS (50 hex digits at least ~150, Django's
    get_random_secret_key ~280, secrets.token_urlsafe(50) ~350); repeated blocks and runs
    score near nothing ('abcde' * 10: 7). It cannot tell a random key from a memorable
    sentence without patterns: the rule is a floor, not a proof.
    """
    import math

    codes = [ord(c) for c in key]
    surprising = 0
    for i, code in enumerate(codes):
        if i >= 2 and code - codes[i - 1] == codes[i - 1] - codes[i - 2]:
            continue  # a run: the step from the previous character, once more
        if i >= 2 and any(
            code == codes[i - p] and codes[i - 1] == codes[i - 1 - p]
            for p in range(1, min(i - 1, 16) + 1)
        ):
            continue  # the characters p places back, repeated
        surprising += 1
    return surprising * math.log2(len(set(codes))) if len(set(codes)) > 1 else 0.0


def _secret_key_problem(key: str) -> str:
    """Why `key` (already stripped) cannot sign sessions and links; "" when it can."""
    if not key:
        return "not set"
    if key == DEV_SECRET_KEY:
        return "the public development key"
    if len(key) < SECRET_KEY_MIN_LENGTH:
        return f"{len(key)} characters long, fewer than {SECRET_KEY_MIN_LENGTH}"
    if len(set(key)) < 5:
        return f"made of {len(set(key))} distinct characters, fewer than 5"
    bits = secret_key_bits(key)
    if bits < SECRET_KEY_MIN_BITS:
        return (
            f"made of repeats and runs (about {bits:.0f} bits of randomness, fewer than "
            f"{SECRET_KEY_MIN_BITS})"
        )
    return ""


def _read_secret_key() -> str:
    # Stripped: a stray space or newline must not turn the development key into "another" key.
    key = os.environ.get("SECRET_KEY", "").strip()
    if not key and SECRET_KEY_FILE.is_file():
        key = SECRET_KEY_FILE.read_text().strip()
    problem = _secret_key_problem(key)
    if not problem:
        return key
    if DEBUG:
        return key or DEV_SECRET_KEY
    # SystemExit, not an exception: the operator reads one line, not a traceback (the key itself
    # is never printed).
    raise SystemExit(
        f"MentalBench will not start: SECRET_KEY is {problem} (set SECRET_KEY or SECRET_KEY_FILE"
        f" to a random value of at least {SECRET_KEY_MIN_LENGTH} characters, e.g. python -c "
        "'import secrets; print(secrets.token_urlsafe(50))'; DEBUG=1 only for development)"
    )


SECRET_KEY = _read_secret_key()

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, served from static/ (no CDN)
    "django_htmx",
    "annotation",
    "judging",
    "analysis",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Below WhiteNoise (which serves precompressed static files itself) and above everything
    # that writes the body, so pages leave compressed.
    "mentalbench.middleware.CompressPagesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "mentalbench.middleware.NoStoreMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

# --- HTTPS and browser hardening (`manage.py check --deploy` is clean with HTTPS=1) ------------
# HTTPS=1 says the site is served over TLS: cookies only over HTTPS, redirect plain HTTP, and HSTS.
# Behind a TLS-terminating proxy also set TRUST_X_FORWARDED_PROTO=1, and only if the proxy
# overwrites X-Forwarded-Proto (otherwise a client could claim HTTPS). Local trials stay on HTTP.
HTTPS = envbool("HTTPS", False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = HTTPS
SESSION_COOKIE_HTTPONLY = True
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", HTTPS)
# Container healthchecks speak plain HTTP inside the compose network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 31_536_000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", HTTPS)
# The preload directive does nothing until the domain is submitted to the browsers' list.
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", HTTPS)
if envbool("TRUST_X_FORWARDED_PROTO", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
X_FRAME_OPTIONS = "DENY"


# Where links in e-mails point (password links): scheme://host[:port], no path. Never the
# request's Host header, which the client writes ("Host: 127.0.0.1:6666" put that port into a
# reset e-mail's link), and e-mails are sent by a worker that has no request. Unset: the first
# host of ALLOWED_HOSTS, over https when HTTPS=1 (docker-compose's ALLOWED_HOSTS names the site
# first); bin/up sets it to the address it serves.
def _site_url() -> str:
    from urllib.parse import urlsplit

    value = os.environ.get("SITE_URL", "").strip()
    if not value:
        host = next((h for h in ALLOWED_HOSTS if h != "*" and not h.startswith(".")), "")
        if not host:
            raise ImproperlyConfigured(
                "SITE_URL is not set and ALLOWED_HOSTS names no single host to build it from: "
                "set SITE_URL=https://<the site's host>"
            )
        return f"{'https' if HTTPS else 'http'}://{host}"
    parts = urlsplit(value)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:  # not a number, or out of range
        port_ok = False
    if (
        not port_ok
        or parts.scheme not in {"http", "https"}
        or not parts.hostname
        or parts.username is not None
        or parts.path.strip("/")
        or parts.query
        or parts.fragment
    ):
        raise ImproperlyConfigured(
            f"SITE_URL={value!r} is not a site address: use scheme://host[:port], e.g. "
            "https://mentalbench.hospital.example"
        )
    if HTTPS and parts.scheme != "https":
        raise ImproperlyConfigured(f"SITE_URL={value!r} must start with https:// when HTTPS=1")
    return f"{parts.scheme}://{parts.netloc}"


SITE_URL = _site_url()

# Content-Security-Policy: every script, style sheet and chart library is served from static/, so
# scripts may come from this site only — no inline code, no eval (charts use vega-interpreter).
# Inline *styles* stay allowed: Vega's SVG renderer and vega-embed set style attributes, and a
# style cannot run code.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:", "blob:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

ROOT_URLCONF = "mentalbench.urls"
WSGI_APPLICATION = "mentalbench.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "mentalbench.context_processors.nav",
            ],
        },
    },
]

# Postgres (psycopg 3) when DATABASE_URL is set, else a SQLite file for trying the platform out.
DATABASE_URL = os.environ.get("DATABASE_URL", "")
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL or f"sqlite:///{BASE_DIR / 'db.sqlite3'}",
        conn_max_age=envint("DB_CONN_MAX_AGE", 60),
        conn_health_checks=True,
    )
}
# --- Embedded SQLite default: safe under concurrent autosaves (docs/sqlite.md) ---
# Several gunicorn workers write one file. The write-ahead log lets readers run beside the one
# writer; IMMEDIATE transactions take the write lock when they begin, so a transaction never has
# to upgrade a read lock mid-way (SQLite answers that with "database is locked" at once, without
# waiting); the busy timeout makes a writer wait its turn instead of failing. Commits stay
# fully synced (synchronous=FULL, the default): an acknowledged save survives a power cut.
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,  # seconds a transaction waits for the write lock
        "init_command": "PRAGMA journal_mode=WAL",
        **DATABASES["default"].get("OPTIONS", {}),
    }
    # SQLite cannot build the NULLS NOT DISTINCT unique constraints that keep a rating single on
    # PostgreSQL; Django leaves them out and says so (models.W047) on every start. What keeps a
    # rating single there instead is docs/sqlite.md's last section: said once in the docs, not
    # on every start of the embedded default, where a newcomer reads it as trouble.
    SILENCED_SYSTEM_CHECKS = ["models.W047"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "account_login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "account_login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", BASE_DIR / "staticfiles"))
MEDIA_ROOT = Path(os.environ.get("MEDIA_ROOT", BASE_DIR / "media"))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Hashed, precompressed, cached for a year (mentalbench/storage.py).
    "staticfiles": {"BACKEND": "mentalbench.storage.StaticStorage"},
}
# --- Import limits: what one imported file (command or /imports/ upload) may hold -------------
# A file beyond any of them is refused with a one-line message before it is read into memory
# (docs/importing.md#limits). The defaults leave room for MentalBench-100k-sized CSVs (10,000
# conversations × 10 responses) and the released MentalAlign-70k workbooks.
IMPORT_MAX_FILE_BYTES = envint("IMPORT_MAX_FILE_BYTES", 256 * 1024 * 1024)
IMPORT_MAX_UNCOMPRESSED_BYTES = envint("IMPORT_MAX_UNCOMPRESSED_BYTES", 64 * 1024 * 1024)
IMPORT_MAX_CELLS = envint("IMPORT_MAX_CELLS", 2_000_000)
IMPORT_MAX_COLUMNS = envint("IMPORT_MAX_COLUMNS", 200)
IMPORT_MAX_RESPONDERS_PER_STUDY = envint("IMPORT_MAX_RESPONDERS_PER_STUDY", 100)
IMPORT_MAX_CELL_CHARS = envint("IMPORT_MAX_CELL_CHARS", 100_000)
IMPORT_MAX_JSON_DEPTH = envint("IMPORT_MAX_JSON_DEPTH", 20)
# The κ_F1 page's predictions CSV (docs/distortions.md): its size is checked before parsing, rows
# and distinct labels while reading; memory then grows linearly with the rows.
KAPPA_F1_MAX_FILE_BYTES = envint("KAPPA_F1_MAX_FILE_BYTES", 5 * 1024 * 1024)
KAPPA_F1_MAX_ROWS = envint("KAPPA_F1_MAX_ROWS", 50_000)
KAPPA_F1_MAX_LABELS = envint("KAPPA_F1_MAX_LABELS", 50)
for _name in [n for n in dir() if n.startswith(("IMPORT_MAX_", "KAPPA_F1_MAX_"))]:
    if globals()[_name] < 1:
        raise ImproperlyConfigured(f"{_name}={globals()[_name]} must be a positive integer")
del _name
# Uploads over 2.5 MiB stream to a temporary file rather than memory; the other form fields of a
# request may hold at most 2.5 MiB (Django's defaults).
DATA_UPLOAD_MAX_MEMORY_SIZE = envint("DATA_UPLOAD_MAX_MEMORY_SIZE", 2_621_440)
FILE_UPLOAD_MAX_MEMORY_SIZE = envint("FILE_UPLOAD_MAX_MEMORY_SIZE", 2_621_440)
# --- end of import limits ----------------------------------------------------------------------

# Celery: Redis when REDIS_URL is set; otherwise a folder of message files (kombu's filesystem
# transport), which needs no server: `bin/up` runs real workers and beat on it, so a launch
# returns at once and no web request ever runs a run (docs/operations.md). Eager mode (tasks run
# inside whoever sends them) is never a default: only a test or a benchmark that asks for it.
REDIS_URL = os.environ.get("REDIS_URL", "")
CELERY_BROKER_URL = REDIS_URL or "filesystem://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = envbool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True  # a killed worker's task is redelivered; services are idempotent
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# Two queues, so that long runs never starve the upkeep: `runs` carries the run loops (each holds
# a worker process for as long as its run lasts); `upkeep` carries the sweeper, batch submits,
# polls and cancels, which are short and must run on time. bin/up and docker-compose.yml give
# each queue a worker of its own; a worker started without -Q consumes both.
CELERY_TASK_DEFAULT_QUEUE = "runs"
CELERY_TASK_QUEUES: dict[str, dict[str, Any]] = {"runs": {}, "upkeep": {}}
CELERY_TASK_ROUTES = {
    name: {"queue": "upkeep"}
    for name in (
        "accounts.tasks.password_reset_mail_send",
        "annotation.tasks.invitation_mail_send",
        "annotation.tasks.escalation_mail_send",
        "annotation.tasks.reminders_send",
        "judging.tasks.runs_sweep",
        "judging.tasks.batch_submit",
        "judging.tasks.batches_poll",
        "judging.tasks.batch_poll",
        "judging.tasks.batch_cancel",
        "analysis.tasks.jobs_sweep",
        "annotation.tasks.webhook_deliver",
        "annotation.tasks.webhooks_deliver_due",
    )
}
if REDIS_URL:
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {
        "visibility_timeout": envint("CELERY_VISIBILITY_TIMEOUT", 3600)
    }
else:
    # One folder holds the queued messages; a consumer takes a message by renaming it into
    # `processed/` (atomic within one file system, so two consumers never both get it), which
    # bin/up empties of files older than a day at each start.
    CELERY_BROKER_DIR = Path(os.environ.get("CELERY_BROKER_DIR") or BASE_DIR / ".celery-broker")
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(CELERY_BROKER_DIR / "queue"),
        "data_folder_out": str(CELERY_BROKER_DIR / "queue"),
        "processed_folder": str(CELERY_BROKER_DIR / "processed"),
        "store_processed": True,
        "control_folder": str(CELERY_BROKER_DIR / "control"),
        # An idle worker looks for new messages this often: the delay before a launch starts.
        "polling_interval": 0.2,
    }

# The Celery worker processes that run tasks lower their CPU priority by this much (nice, 0–19;
# 0 leaves it): where the workers share cores with the web server, a job's computation waits for
# the requests people are waiting on, not the reverse (docs/jobs.md, docs/benchmarks.md).
WORKER_NICE = envint("WORKER_NICE", 10)
if not 0 <= WORKER_NICE <= 19:
    raise ImproperlyConfigured(f"WORKER_NICE must be from 0 to 19, got {WORKER_NICE}")
# ...and, on Linux, run at the idle scheduling policy (SCHED_IDLE, no privilege needed): they
# get a core only when no web worker or database process wants it (mentalbench/celery.py).
WORKER_IDLE_SCHEDULING = envbool("WORKER_IDLE_SCHEDULING", True)

# Background jobs (docs/jobs.md): how many one person may have queued or running at once, how
# long a finished job's result is kept, how long one may run, and how long a running job may go
# without reporting progress before the sweeper calls its worker gone.
JOBS_MAX_ACTIVE_PER_USER = envint("JOBS_MAX_ACTIVE_PER_USER", 2)
JOBS_RESULT_HOURS = envint("JOBS_RESULT_HOURS", 24)
JOBS_TIME_LIMIT_SECONDS = envint("JOBS_TIME_LIMIT_SECONDS", 3600)
JOBS_STALE_SECONDS = envint("JOBS_STALE_SECONDS", 300)
for _name in (
    "JOBS_MAX_ACTIVE_PER_USER",
    "JOBS_RESULT_HOURS",
    "JOBS_TIME_LIMIT_SECONDS",
    "JOBS_STALE_SECONDS",
):
    if globals()[_name] < 1:
        raise ImproperlyConfigured(f"{_name} must be at least 1, got {globals()[_name]}")

# Webhooks (docs/webhooks.md): the wait before a failed delivery's next attempt doubles from the
# base up to the maximum; after the last attempt it is given up. Beat looks for due deliveries
# every WEBHOOK_POLL_SECONDS; one request waits at most WEBHOOK_TIMEOUT_SECONDS.
WEBHOOK_RETRY_BASE_SECONDS = envfloat("WEBHOOK_RETRY_BASE_SECONDS", 10.0)
WEBHOOK_RETRY_MAX_SECONDS = envfloat("WEBHOOK_RETRY_MAX_SECONDS", 3600.0)
WEBHOOK_MAX_ATTEMPTS = envint("WEBHOOK_MAX_ATTEMPTS", 20)
WEBHOOK_POLL_SECONDS = envfloat("WEBHOOK_POLL_SECONDS", 10.0)
WEBHOOK_TIMEOUT_SECONDS = envfloat("WEBHOOK_TIMEOUT_SECONDS", 10.0)
for _name in (
    "WEBHOOK_RETRY_BASE_SECONDS",
    "WEBHOOK_RETRY_MAX_SECONDS",
    "WEBHOOK_MAX_ATTEMPTS",
    "WEBHOOK_POLL_SECONDS",
    "WEBHOOK_TIMEOUT_SECONDS",
):
    if not globals()[_name] > 0:  # also refuses nan
        raise ImproperlyConfigured(f"{_name}={globals()[_name]} must be positive")

# Run sweeper: every this many seconds Celery beat moves on runs whose workers died; see
# docs/judging.md.
JUDGING_SWEEP_SECONDS = envint("JUDGING_SWEEP_SECONDS", 30)
if JUDGING_SWEEP_SECONDS < 1:
    raise ImproperlyConfigured(
        f"JUDGING_SWEEP_SECONDS must be at least 1, got {JUDGING_SWEEP_SECONDS}"
    )

# Run loops (docs/judging.md): a running item whose heartbeat is older than the lease belonged
# to a worker that died and is claimed again; a loop waits out a database that went away (a
# PostgreSQL restart) this long before it leaves its items to the sweeper.
JUDGING_LEASE_SECONDS = envfloat("JUDGING_LEASE_SECONDS", 60.0)
JUDGING_DB_OUTAGE_SECONDS = envfloat("JUDGING_DB_OUTAGE_SECONDS", 120.0)
# The Redis that holds the per-endpoint rate limits, shared by every worker (tests give it a db
# of its own); without one each process limits itself.
JUDGING_RATELIMIT_REDIS_URL = os.environ.get("JUDGING_RATELIMIT_REDIS_URL") or REDIS_URL

# Batch mode (provider batch interfaces): the providers' own limits per request file, and how
# often Celery beat polls open batches (each batch backs off from the first interval to the last).
JUDGING_BATCH_LIMITS = {
    # OpenAI Batch: 50,000 requests and 200 MB per input file.
    "openai": {
        "requests": envint("JUDGING_BATCH_OPENAI_REQUESTS", 50_000),
        "bytes": envint("JUDGING_BATCH_OPENAI_BYTES", 200 * 1024 * 1024),
    },
    # Anthropic Message Batches: 100,000 requests or 256 MB per batch.
    "anthropic": {
        "requests": envint("JUDGING_BATCH_ANTHROPIC_REQUESTS", 100_000),
        "bytes": envint("JUDGING_BATCH_ANTHROPIC_BYTES", 256 * 1024 * 1024),
    },
}
JUDGING_BATCH_POLL_SECONDS = envint("JUDGING_BATCH_POLL_SECONDS", 30)
JUDGING_BATCH_POLL_MAX_SECONDS = envint("JUDGING_BATCH_POLL_MAX_SECONDS", 600)
# Results of an ended batch stored per transaction: small enough that a killed poller loses
# little, large enough that 100,000 results take a few dozen round trips per table.
JUDGING_BATCH_STORE_CHUNK = envint("JUDGING_BATCH_STORE_CHUNK", 5000)
# A batch still "building" this long after it was created belonged to a submitter that died.
JUDGING_BATCH_BUILD_LEASE_SECONDS = envfloat("JUDGING_BATCH_BUILD_LEASE_SECONDS", 900.0)
for _name in (
    "JUDGING_LEASE_SECONDS",
    "JUDGING_DB_OUTAGE_SECONDS",
    "JUDGING_BATCH_STORE_CHUNK",
    "JUDGING_BATCH_BUILD_LEASE_SECONDS",
):
    if not globals()[_name] > 0:  # also refuses nan
        raise ImproperlyConfigured(f"{_name}={globals()[_name]} must be positive")
del _name

CACHES = {
    "default": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}

# Sessions read from the cache first: one query less on every autosave.
SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"

REST_FRAMEWORK: dict[str, Any] = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # The API's contract (query parameters, pages, error bodies) for the server and the schema
    # alike: analysis/api_contract.py and analysis/api_params.py.
    "DEFAULT_SCHEMA_CLASS": "analysis.api_contract.ApiAutoSchema",
    "DEFAULT_PAGINATION_CLASS": "analysis.api_params.ApiPagination",
    "EXCEPTION_HANDLER": "analysis.api_contract.api_exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "MentalBench API",
    "DESCRIPTION": (
        "Read-only access to studies, ratings and reliability reports. Lists come in pages "
        "(limit, offset; each list's `limit` says the largest); a whole study's data is the "
        "streamed CSV export."
    ),
    "VERSION": "1",
    # The schema describes the API, not the schema endpoint itself.
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # No deep links: Swagger UI puts each operation's link inside the button that opens it, a
    # control inside a control that screen readers cannot use (axe's nested-interactive).
    "SWAGGER_UI_SETTINGS": {"deepLinking": False},
}

# --- LLM endpoint secrets (docs/judging.md, "Keys") ---------------------------------------
# An endpoint may name an environment variable as its API key only when the operator allowed it:
# a name starting with LLM_KEY_ENV_PREFIX ("" switches the prefix rule off) or one listed in
# LLM_KEY_ENV_ALLOWED. Anything else would let whoever edits endpoints send any worker variable
# (DATABASE_URL, SECRET_KEY) to a URL of their choice.
LLM_KEY_ENV_PREFIX = os.environ.get("LLM_KEY_ENV_PREFIX", "MENTALBENCH_KEY_")
LLM_KEY_ENV_ALLOWED = envlist("LLM_KEY_ENV_ALLOWED", ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"])
# Fernet keys that encrypt secrets stored in the database (endpoints' API keys, webhooks'
# secrets; mentalbench/encryption.py): the first encrypts, all decrypt (so a new key goes first
# and the old one stays until `manage.py reencrypt_secrets` has run). Unset: API keys cannot be
# stored in the database (endpoints use environment variables) and webhooks cannot be added.
MENTALBENCH_ENCRYPTION_KEYS = envlist("MENTALBENCH_ENCRYPTION_KEYS", [])
for _position, _key in enumerate(MENTALBENCH_ENCRYPTION_KEYS, start=1):
    try:
        Fernet(_key)
    except ValueError:
        # Never echo the value: it is a secret, and a near-miss of one.
        raise ImproperlyConfigured(
            f"MENTALBENCH_ENCRYPTION_KEYS: key {_position} is not a Fernet key (32 url-safe "
            "base64-encoded bytes); make one with: python -c 'from cryptography.fernet import "
            "Fernet; print(Fernet.generate_key().decode())'"
        ) from None

# The first admin, created once by `manage.py create_admin` (docker-compose runs it); nothing
# when both are unset. The password meets AUTH_PASSWORD_VALIDATORS or is refused.
MENTALBENCH_ADMIN_USERNAME = os.environ.get("MENTALBENCH_ADMIN_USERNAME", "").strip()
MENTALBENCH_ADMIN_PASSWORD = os.environ.get("MENTALBENCH_ADMIN_PASSWORD", "")
MENTALBENCH_ADMIN_EMAIL = os.environ.get("MENTALBENCH_ADMIN_EMAIL", "")
# The demo accounts' password (`manage.py seed_demo`).
DEMO_PASSWORD = os.environ.get("DEMO_PASSWORD", "mentalbench-demo")

# Where the released MentalAlign-70k files and the paper tables live on the team's machines
# (../shared beside the checkout). Only tests and the README's optional import read it.
SHARED_DIR = Path(os.environ.get("MENTALBENCH_SHARED", BASE_DIR.parent / "shared"))

LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}

# --- Access control: login lock-out, password rules, API tokens ---------------------------------
# Kept in one block (it adjusts lists defined above) so the access rules read in one place; see
# docs/api-tokens.md. Login: django-axes locks an account (and an address) after
# LOGIN_FAILURE_LIMIT wrong passwords for LOGIN_LOCKOUT_MINUTES. API: knox tokens (only a SHA-512
# digest at rest), each with an expiry, revocable by their owner; failed token attempts are
# throttled per client address.
from datetime import timedelta  # noqa: E402

# DRF's authtoken kept raw tokens in the database; knox replaces it (accounts' migration drops
# the old table).
# accounts comes before django.contrib.auth so that its createsuperuser (which knows usernames
# are unique without regard to case) is the one manage.py runs: the first app with a command wins.
INSTALLED_APPS = [
    "accounts",
    *(app for app in INSTALLED_APPS if app != "rest_framework.authtoken"),
    "axes",
    "knox",
]
# Axes goes last: it turns a lock-out into its own response.
MIDDLEWARE = [*MIDDLEWARE, "axes.middleware.AxesMiddleware"]
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# How many reverse proxies in front of the app append to X-Forwarded-For. 0: the address is
# REMOTE_ADDR and X-Forwarded-For is ignored (a client could otherwise forge it).
NUM_PROXIES = envint("NUM_PROXIES", 0)
AXES_FAILURE_LIMIT = envint("LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=envint("LOGIN_LOCKOUT_MINUTES", 15))
# Either an account or an address that has failed too often is locked. Behind a hospital NAT,
# where many clinicians share one address, "username" alone keeps one person's typos from locking
# out the ward (axes then warns that an address is not limited).
AXES_LOCKOUT_PARAMETERS = envlist("LOGIN_LOCKOUT_PARAMETERS", ["username", "ip_address"])
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# Failures and lock-outs are logged (WARNING, usernames and addresses masked); the per-sign-in
# INFO lines and the start-up banner are not.
AXES_VERBOSE = False
LOGGING.setdefault("loggers", {})["axes"] = {"level": "WARNING"}
AXES_IPWARE_PROXY_COUNT = NUM_PROXIES or None
AXES_IPWARE_META_PRECEDENCE_ORDER = (
    ["HTTP_X_FORWARDED_FOR", "REMOTE_ADDR"] if NUM_PROXIES else ["REMOTE_ADDR"]
)
API_TOKEN_DAYS = envint("API_TOKEN_DAYS", 90)
API_TOKEN_MAX_DAYS = envint("API_TOKEN_MAX_DAYS", 365)
API_TOKENS_PER_USER = envint("API_TOKENS_PER_USER", 10)
if not 1 <= API_TOKEN_DAYS <= API_TOKEN_MAX_DAYS:
    raise ImproperlyConfigured(
        f"API_TOKEN_DAYS={API_TOKEN_DAYS} must be between 1 and API_TOKEN_MAX_DAYS="
        f"{API_TOKEN_MAX_DAYS}"
    )
REST_KNOX = {
    "TOKEN_TTL": timedelta(days=API_TOKEN_DAYS),
    "AUTO_REFRESH": False,
    "AUTH_HEADER_PREFIX": "Token",  # the header scripts already send
}
REST_FRAMEWORK = {
    **REST_FRAMEWORK,
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "NUM_PROXIES": NUM_PROXIES,
    "DEFAULT_THROTTLE_RATES": {
        "api_token_failures": os.environ.get("API_TOKEN_FAILURE_RATE", "10/min"),
    },
}


# --- Accounts: sign-in, forgot password, two-factor, single sign-on (docs/security.md) ----------
# django-allauth runs the sign-in pages. Accounts are made by admins (invites) or, when single
# sign-on is configured, on the first SSO sign-in — never by self sign-up — and roles stay Django
# groups granted by an admin. django-axes still counts failed passwords (allauth's own
# failed-login limit is off so that one rule, LOGIN_FAILURE_LIMIT, decides).
INSTALLED_APPS += [
    "allauth",
    "allauth.account",
    "allauth.mfa",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
]
_auth = MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware")
MIDDLEWARE[_auth + 1 : _auth + 1] = [
    "allauth.account.middleware.AccountMiddleware",
    # Wraps what follows: an autosave told to sign in first keeps its edit (see the class).
    "accounts.middleware.HtmxSignInMiddleware",
    # A session idle for SESSION_IDLE_HOURS is signed out before anything else reads it.
    "accounts.middleware.IdleTimeoutMiddleware",
    # Staff and the admin group use the platform only after a second factor (TOTP).
    "accounts.middleware.TwoFactorRequiredMiddleware",
]
del _auth
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
ACCOUNT_ADAPTER = "accounts.adapters.AccountAdapter"
SOCIALACCOUNT_ADAPTER = "accounts.adapters.SsoAdapter"
ACCOUNT_LOGIN_METHODS = {"username"}
ACCOUNT_SIGNUP_FIELDS = ["username*", "password1*", "password2*"]
ACCOUNT_EMAIL_VERIFICATION = "none"
ACCOUNT_SESSION_REMEMBER = False  # no "remember me" on shared ward computers
ACCOUNT_LOGOUT_ON_PASSWORD_CHANGE = True
# Sensitive changes ask for the password (or, for an account with an authenticator, its code)
# again if the session has not given it in the last 5 minutes: linking a single sign-on
# identity, and the password pages (accounts/views.py), besides allauth's two-factor pages.
ACCOUNT_REAUTHENTICATION_REQUIRED = True
SOCIALACCOUNT_REAUTHENTICATION_REQUIRED = True
ACCOUNT_PRESERVE_USERNAME_CASING = True
# django-axes alone limits sign-ins (LOGIN_FAILURE_LIMIT): allauth's per-address sign-in limits
# would also stop a ward of clinicians behind one hospital address. Its other limits (forgot
# password: 20 a minute per address, 5 per account) stay.
ACCOUNT_RATE_LIMITS = {"login_failed": None, "login": None}
# "Forgot password" and the admins' set-password links share one token: single-use (a new
# password or a sign-in voids it), void once the account's rights change, and expiring.
ACCOUNT_PASSWORD_RESET_TOKEN_GENERATOR = "accounts.tokens.PrivilegeBoundTokenGenerator"
# "Forgot password" answers the same, in the same time, whether or not the address is known:
# the request only hands the address to a Celery task (accounts.tasks), which looks the
# account up and sends the link built from SITE_URL. No e-mail goes to an address no account
# has (allauth would send "someone asked for an account that does not exist" to any address
# typed into the form).
ACCOUNT_FORMS = {"reset_password": "accounts.forms.PasswordResetRequestForm"}
ACCOUNT_EMAIL_UNKNOWN_ACCOUNTS = False
ACCOUNT_EMAIL_SUBJECT_PREFIX = "[MentalBench] "
PASSWORD_RESET_TIMEOUT = envint("PASSWORD_LINK_HOURS", 72) * 3600
if PASSWORD_RESET_TIMEOUT < 3600:
    raise ImproperlyConfigured("PASSWORD_LINK_HOURS must be at least 1")

# E-mail (forgot-password links, sent by the upkeep worker: accounts/tasks.py). Without
# EMAIL_HOST the message is printed in that worker's log (bin/up: upkeep.log); with it, sent
# through that SMTP server.
EMAIL_HOST = os.environ.get("EMAIL_HOST", "")
EMAIL_BACKEND = (
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend"
)
EMAIL_PORT = envint("EMAIL_PORT", 587)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", True)
EMAIL_TIMEOUT = envint("EMAIL_TIMEOUT", 20)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "mentalbench@localhost")
# How often Celery beat looks for clinicians to remind (each study says after how many days
# without progress: Study.remind_after_days); a pause is reminded once however often it looks.
MAIL_REMINDER_CHECK_SECONDS = envint("MAIL_REMINDER_CHECK_SECONDS", 3600)
if MAIL_REMINDER_CHECK_SECONDS < 60:
    raise ImproperlyConfigured(
        f"MAIL_REMINDER_CHECK_SECONDS must be at least 60, got {MAIL_REMINDER_CHECK_SECONDS}"
    )
# How many days before a study's deadline each clinician with open work in it is reminded (once
# per deadline; 0: no reminder before it), and whether they hear once more when it has passed.
MAIL_DEADLINE_REMIND_DAYS = envint("MAIL_DEADLINE_REMIND_DAYS", 3)
if MAIL_DEADLINE_REMIND_DAYS < 0:
    raise ImproperlyConfigured(
        f"MAIL_DEADLINE_REMIND_DAYS must be 0 or more, got {MAIL_DEADLINE_REMIND_DAYS}"
    )
MAIL_DEADLINE_PASSED = envbool("MAIL_DEADLINE_PASSED", True)
# Whether each study's leads get a weekly e-mail of its progress (counts only).
MAIL_LEAD_DIGEST = envbool("MAIL_LEAD_DIGEST", True)

# Two-factor: TOTP apps with one-time recovery codes.
MFA_SUPPORTED_TYPES = ["totp", "recovery_codes"]
MFA_TOTP_ISSUER = os.environ.get("MFA_TOTP_ISSUER", "MentalBench")
# A code from the 30-second period before or after the server's also counts (phones' clocks
# drift); each code still works once only, enrolment's included (accounts/mfa.py).
MFA_TOTP_TOLERANCE = 1
MFA_FORMS = {
    "authenticate": "accounts.mfa.AuthenticateForm",
    "reauthenticate": "accounts.mfa.ReauthenticateForm",
    "activate_totp": "accounts.mfa.ActivateTOTPForm",
}
# Recovery codes are shown once, right after they are made; to see codes again, generate new
# ones (which voids the old).
MFA_RECOVERY_CODES_SHOW_ONCE = True

# Idle sessions end after SESSION_IDLE_HOURS without a request (shared ward computers); work
# saved by autosave stays saved, and unsent edits wait in the browser until the next sign-in.
SESSION_IDLE_HOURS = envint("SESSION_IDLE_HOURS", 8)
if SESSION_IDLE_HOURS < 1:
    raise ImproperlyConfigured("SESSION_IDLE_HOURS must be at least 1")
SESSION_COOKIE_AGE = SESSION_IDLE_HOURS * 3600

# The sign-in log (who, when, from where, succeeded or not, second factor used), kept this many
# days; older rows are deleted as new ones are written.
SIGNIN_LOG_DAYS = envint("SIGNIN_LOG_DAYS", 365)

# Single sign-on with the hospital's OpenID Connect provider: off unless SSO_OIDC_SERVER_URL is
# set. The provider is found by discovery (<server>/.well-known/openid-configuration); the
# authorization code flow uses PKCE, and the ID token's signature is checked against the
# provider's published keys. A first SSO sign-in creates an account with no role.
SSO_OIDC_SERVER_URL = os.environ.get("SSO_OIDC_SERVER_URL", "")
SOCIALACCOUNT_PROVIDERS: dict[str, Any] = {}


def csp_admitting_sso(policy: dict[str, Any], server_url: str) -> dict[str, Any]:
    """`policy` whose form-action also admits the identity provider's origin: the SSO button's
    form is answered with a redirect there, and browsers hold a form's redirects to
    form-action."""
    from urllib.parse import urlsplit

    parts = urlsplit(server_url)
    directives = dict(policy["DIRECTIVES"])
    directives["form-action"] = [*directives["form-action"], f"{parts.scheme}://{parts.netloc}"]
    return {**policy, "DIRECTIVES": directives}


if SSO_OIDC_SERVER_URL:
    _client_secret = os.environ.get("SSO_OIDC_CLIENT_SECRET", "")
    if not os.environ.get("SSO_OIDC_CLIENT_ID"):
        raise ImproperlyConfigured("SSO_OIDC_SERVER_URL is set but SSO_OIDC_CLIENT_ID is not")
    # The ID token fetched from the token endpoint is trusted on the strength of that
    # connection's TLS (OpenID Connect Core 3.1.3.7), so plain HTTP is for development only.
    if not SSO_OIDC_SERVER_URL.startswith("https://") and not DEBUG:
        raise ImproperlyConfigured(
            f"SSO_OIDC_SERVER_URL={SSO_OIDC_SERVER_URL!r} must start with https://"
        )
    CONTENT_SECURITY_POLICY = csp_admitting_sso(CONTENT_SECURITY_POLICY, SSO_OIDC_SERVER_URL)
    SOCIALACCOUNT_PROVIDERS["openid_connect"] = {
        "OAUTH_PKCE_ENABLED": True,
        "APPS": [
            {
                "provider_id": "hospital",
                "name": os.environ.get("SSO_OIDC_NAME", "the hospital's sign-in"),
                "client_id": os.environ["SSO_OIDC_CLIENT_ID"],
                "secret": _client_secret,
                "settings": {
                    "server_url": SSO_OIDC_SERVER_URL,
                    "token_auth_method": "client_secret_post",
                },
            }
        ],
    }
SOCIALACCOUNT_AUTO_SIGNUP = True
# Never join an SSO identity to an existing account by its e-mail address: whoever controls an
# address at the identity provider would sign in as the local account that shares it.
SOCIALACCOUNT_EMAIL_AUTHENTICATION = False
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = False
SOCIALACCOUNT_STORE_TOKENS = False
SOCIALACCOUNT_LOGIN_ON_GET = False
