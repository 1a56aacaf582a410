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


def _read_secret_key() -> str:
    key = os.environ.get("SECRET_KEY", "")
    if not key and SECRET_KEY_FILE.is_file():
        key = SECRET_KEY_FILE.read_text().strip()
    if key and key != DEV_SECRET_KEY:
        return key
    if DEBUG:
        return DEV_SECRET_KEY
    # SystemExit, not an exception: the operator reads one line, not a traceback.
    raise SystemExit(
        "MentalBench will not start: SECRET_KEY is "
        + ("the public development key" if key else "not set")
        + " (set SECRET_KEY or SECRET_KEY_FILE to a long random value;"
        + " DEBUG=1 only for development)"
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
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

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
for _name in [n for n in dir() if n.startswith("IMPORT_MAX_")]:
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
        "judging.tasks.runs_sweep",
        "judging.tasks.batch_submit",
        "judging.tasks.batches_poll",
        "judging.tasks.batch_poll",
        "judging.tasks.batch_cancel",
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

# Run sweeper: every this many seconds Celery beat moves on runs whose workers died; see
# docs/judging.md.
JUDGING_SWEEP_SECONDS = envint("JUDGING_SWEEP_SECONDS", 30)
if JUDGING_SWEEP_SECONDS < 1:
    raise ImproperlyConfigured(
        f"JUDGING_SWEEP_SECONDS must be at least 1, got {JUDGING_SWEEP_SECONDS}"
    )

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

CACHES = {
    "default": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}

# Sessions read from the cache first: one query less on every autosave.
SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 500,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "MentalBench API",
    "DESCRIPTION": "Read-only access to studies, ratings and reliability reports.",
    "VERSION": "1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
}

# --- LLM endpoint secrets (docs/judging.md, "Keys") ---------------------------------------
# An endpoint may name an environment variable as its API key only when the operator allowed it:
# a name starting with LLM_KEY_ENV_PREFIX ("" switches the prefix rule off) or one listed in
# LLM_KEY_ENV_ALLOWED. Anything else would let whoever edits endpoints send any worker variable
# (DATABASE_URL, SECRET_KEY) to a URL of their choice.
LLM_KEY_ENV_PREFIX = os.environ.get("LLM_KEY_ENV_PREFIX", "MENTALBENCH_KEY_")
LLM_KEY_ENV_ALLOWED = envlist("LLM_KEY_ENV_ALLOWED", ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"])
# Fernet keys that encrypt API keys stored in the database: the first encrypts, all decrypt (so
# a new key goes first and the old one stays until `manage.py reencrypt_api_keys` has run).
# Unset: keys cannot be stored in the database; endpoints use environment variables.
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
INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "rest_framework.authtoken"] + [
    "axes",
    "knox",
    "accounts",
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
