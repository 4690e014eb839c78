"""Django settings, read from environment variables (django-environ).

Every setting has a safe local default so that `make demo` runs with nothing installed
but Python: SQLite in ``var/``, an embedded SQLite Celery broker in ``var/``, and the
local executor. Production (``MRL_PRODUCTION=true``) refuses to start without a
``SECRET_KEY`` and turns on the secure-cookie and HTTPS settings.

Every variable read here is declared, with its default and what it does, in
``webapp/env_vars.py``; ``docs/ENVIRONMENT.md`` is the table generated from it
(``python -m webapp.env_vars > docs/ENVIRONMENT.md``). A read of an undeclared variable
fails ``tests/test_environment_documented.py``.
"""

from __future__ import annotations

import os
import secrets
import sys
from datetime import timedelta
from pathlib import Path

import environ
import plotly

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()


def env_bool(name: str, default: bool) -> bool:
    """Read a boolean strictly: only true/false/1/0/yes/no (any case); anything else fails.

    django-environ quietly reads a typo such as ``ture`` as False; a production switch
    must not.
    """
    raw = env.str(name, default="")
    if raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise environ.ImproperlyConfigured(f"{name}={raw!r} is not a boolean; use true or false")


PRODUCTION = env_bool("MRL_PRODUCTION", False)
VAR_DIR = Path(env.str("MRL_VAR_DIR", default=str(BASE_DIR / "var")))


def _dev_secret_key() -> str:
    """A random key generated once per checkout and kept in ``var/`` (never committed)."""
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        key_file.write_text(secrets.token_urlsafe(50))
        key_file.chmod(0o600)
    return key_file.read_text().strip()


# --- core ---------------------------------------------------------------------------
if PRODUCTION:
    SECRET_KEY = env.str("SECRET_KEY", default="")
    if len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5:
        raise environ.ImproperlyConfigured(
            "MRL_PRODUCTION=true needs SECRET_KEY set to a random string of 50+ characters, "
            "e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))'"
        )
else:
    SECRET_KEY = env.str("SECRET_KEY", default="") or _dev_secret_key()

DEBUG = env_bool("DEBUG", not PRODUCTION)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # login throttling (the "login throttling" section below)
    "axes",
    # the areas, each importing only those above it in this list (tests/test_layers.py)
    "webapp.core",
    "webapp.registry",
    "webapp.runs",
    "webapp.metrics",
    "webapp.evals",
    "webapp.compare",
    "webapp.dashboard",
    # the tables' history before issue 32 (migrations only)
    "webapp.experiments",
]

MIDDLEWARE = [
    # First, so that every response gets the header (static files and redirects too); the
    # policy and why each directive is what it is: webapp/core/csp.py.
    "webapp.core.csp.ContentSecurityPolicyMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: turns a refused login into the lock-out page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "webapp.urls"
WSGI_APPLICATION = "webapp.wsgi.application"

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
            ],
        },
    },
]

# --- database -----------------------------------------------------------------------
DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'demo.sqlite3'}"),
}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
# A kept connection may have died with a database restart; without this check the first
# request of each app process after the restart fails with a 500 (one ``SELECT 1`` per
# request instead).
DATABASES["default"]["CONN_HEALTH_CHECKS"] = env_bool("DATABASE_CONN_HEALTH_CHECKS", True)
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # The demo's web server, worker and ingestion write concurrently: WAL lets readers
    # proceed, IMMEDIATE transactions queue writers instead of failing them.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard:index"
LOGOUT_REDIRECT_URL = "login"

# --- login throttling (django-axes) -------------------------------------------------
# Every login (the site's and the admin's) goes through authenticate(), where axes'
# backend refuses a locked-out client before the password is checked. A client is locked
# out after MRL_LOGIN_FAILURE_LIMIT failed logins within MRL_LOGIN_COOLOFF_MINUTES, counted
# per user name (from any address) OR per client address (for any user name): either
# count locks. Each refused attempt during a lock-out counts too, so the lock lifts
# MRL_LOGIN_COOLOFF_MINUTES after the last attempt, which the lock-out page says
# (webapp/core/login_throttling.py). A successful login clears that user name's failures
# only, not the address's (ibid.).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_FAILURE_LIMIT = env.int("MRL_LOGIN_FAILURE_LIMIT", default=10)
LOGIN_COOLOFF_MINUTES = env.float("MRL_LOGIN_COOLOFF_MINUTES", default=15.0)
if LOGIN_FAILURE_LIMIT < 1 or not LOGIN_COOLOFF_MINUTES > 0:
    raise environ.ImproperlyConfigured(
        f"MRL_LOGIN_FAILURE_LIMIT={LOGIN_FAILURE_LIMIT}, MRL_LOGIN_COOLOFF_MINUTES="
        f"{LOGIN_COOLOFF_MINUTES}: give a limit of 1 or more and a cool-off above 0 minutes"
    )
AXES_FAILURE_LIMIT = LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = timedelta(minutes=LOGIN_COOLOFF_MINUTES)
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_LOCKOUT_CALLABLE = "webapp.core.login_throttling.lockout_response"
AXES_USERNAME_CALLABLE = "webapp.core.login_throttling.attempted_username"
AXES_RESET_ON_SUCCESS = False  # webapp.core.login_throttling.reset_on_success instead
# Successful logins are not what the throttle needs, and nothing would prune that table.
AXES_DISABLE_ACCESS_LOG = True
AXES_VERBOSE = False  # no banner on every manage.py command; lock-outs are still logged


def axes_client_address_settings(trusted_proxies: int) -> dict[str, object]:
    """Where axes (through django-ipware) reads the client's address.

    With no proxy (``MRL_TRUSTED_PROXY_COUNT=0``, the default, and docker/compose.yml as it
    is: gunicorn published directly), the TCP peer ``REMOTE_ADDR`` only: an
    ``X-Forwarded-For`` the client sends is ignored, so it cannot pick the address its
    failures are counted under. Behind N proxies that each append the address they saw
    to ``X-Forwarded-For`` (nginx's ``$proxy_add_x_forwarded_for``), the N-th address
    from the right: the one the outermost proxy saw; what a client wrote further left is
    never read. ipware's count is of the hops after the client (N - 1), and not strict,
    so that a longer, client-extended header is still read from the right; a header
    shorter than N falls back to ``REMOTE_ADDR``.
    """
    if trusted_proxies == 0:
        return {"AXES_IPWARE_META_PRECEDENCE_ORDER": ("REMOTE_ADDR",)}
    return {
        "AXES_IPWARE_META_PRECEDENCE_ORDER": ("HTTP_X_FORWARDED_FOR", "REMOTE_ADDR"),
        "AXES_IPWARE_PROXY_ORDER": "left-most",
        "AXES_IPWARE_PROXY_COUNT": trusted_proxies - 1,
        "IPWARE_STRICT": False,
    }


TRUSTED_PROXY_COUNT = env.int("MRL_TRUSTED_PROXY_COUNT", default=0)
if TRUSTED_PROXY_COUNT < 0:
    raise environ.ImproperlyConfigured(
        f"MRL_TRUSTED_PROXY_COUNT={TRUSTED_PROXY_COUNT}: give 0 (no proxy) or more"
    )
globals().update(axes_client_address_settings(TRUSTED_PROXY_COUNT))

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS: list[Path | tuple[str, Path]] = [
    BASE_DIR / "static",
    # plotly.min.js from the plotly package (no CDN: the app works offline).
    ("vendor/plotly", Path(plotly.__file__).parent / "package_data"),
]
STATIC_ROOT = VAR_DIR / "staticfiles"
# Django's finders, except that a path leaving the static directories (an encoded ../
# under /static/) is "not found", a 404, instead of an exception, a 500 (runserver's
# static handler and WhiteNoise's finder mode both ask them; webapp/core/staticfinders.py).
STATICFILES_FINDERS = [
    "webapp.core.staticfinders.FileSystemFinder",
    "webapp.core.staticfinders.AppDirectoriesFinder",
]

# With DEBUG off (production, and `make demo` under gunicorn) whitenoise serves the static
# files; runserver does it in development. Outside production it serves them straight
# from the finders, so the demo needs no collectstatic.
if not DEBUG:
    security = MIDDLEWARE.index("django.middleware.security.SecurityMiddleware")
    MIDDLEWARE.insert(security + 1, "whitenoise.middleware.WhiteNoiseMiddleware")
    WHITENOISE_USE_FINDERS = not PRODUCTION

# --- production hardening -----------------------------------------------------------
if PRODUCTION:
    if DEBUG:
        raise environ.ImproperlyConfigured(
            "DEBUG=true is refused with MRL_PRODUCTION=true: debug pages show settings and "
            "source to anyone; debug a copy with MRL_PRODUCTION=false instead"
        )
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    # Django's defaults, stated so that a change to them is a visible decision. No page
    # script reads the CSRF cookie (forms carry the token), so it can be HttpOnly too.
    SESSION_COOKIE_HTTPONLY = True
    CSRF_COOKIE_HTTPONLY = True
    X_FRAME_OPTIONS = "DENY"
    SECURE_CONTENT_TYPE_NOSNIFF = True
    SECURE_REFERRER_POLICY = "same-origin"
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    STORAGES = {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }

# --- celery (see scheduler/celery.py) -------------------------------------------------
# Without Redis (the demo) the broker is embedded: a SQLite file in var/ that kombu reads
# through scheduler/embedded_broker.py (atomic delivery, many processes, no server), and
# a real `celery worker` process consumes it. Tests and production use Redis.
EMBEDDED_BROKER_PATH = VAR_DIR / "broker.sqlite3"
CELERY_BROKER_URL = env.str(
    "CELERY_BROKER_URL", default=f"mrl-sqlite+sqlite:///{EMBEDDED_BROKER_PATH}"
)
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {}
if CELERY_BROKER_URL.startswith("filesystem://"):
    raise environ.ImproperlyConfigured(
        "CELERY_BROKER_URL=filesystem:// is no longer supported: its worker can read a "
        "message file before it is written and die. Leave CELERY_BROKER_URL unset for the "
        "embedded SQLite broker, or use redis://"
    )
if CELERY_BROKER_URL.startswith("mrl-sqlite+"):
    # How long an idle worker waits before it looks at the queue again (its latency).
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "polling_interval": env.float("MRL_BROKER_POLLING_SECONDS", default=0.5)
    }
elif CELERY_BROKER_URL.startswith("redis"):
    # A task that is not acknowledged within this time is redelivered; keep it above the
    # longest task (acks_late is on, so a task killed mid-way runs again). A Redis that
    # stops answering makes a send (a launch, beat) fail, after socket_timeout on each of
    # Celery's publish retries (about 150 s), instead of hanging the request forever: the
    # run stays queued and the sync sends it again.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": 3600,
        "socket_timeout": 30,
        "socket_connect_timeout": 10,
    }
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default="") or None
CELERY_TASK_IGNORE_RESULT = CELERY_RESULT_BACKEND is None
CELERY_TASK_DEFAULT_QUEUE = env.str("CELERY_TASK_DEFAULT_QUEUE", default="celery")
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = TIME_ZONE
# Worker liveness (webapp/core/selectors.py::worker_status): beat asks a worker to report
# in every MRL_WORKER_HEARTBEAT_SECONDS; with no report for MRL_WORKER_OFFLINE_AFTER_SECONDS
# the run, experiment and sweep pages and the launch message say no worker is running.
# Keep the second a few heartbeats above the first.
WORKER_HEARTBEAT_SECONDS = env.float("MRL_WORKER_HEARTBEAT_SECONDS", default=30.0)
WORKER_OFFLINE_AFTER_SECONDS = env.float("MRL_WORKER_OFFLINE_AFTER_SECONDS", default=90.0)
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "worker-heartbeat": {
        "task": "scheduler.tasks.worker_heartbeat",
        "schedule": WORKER_HEARTBEAT_SECONDS,
    },
    "runs-sync": {
        "task": "scheduler.tasks.runs_sync",
        "schedule": env.float("MRL_STATUS_SYNC_SECONDS", default=5.0),
    },
    # Follows evaluation jobs and queues automatic evaluations (scheduler/evaluations.py).
    "evaluations-sync": {
        "task": "scheduler.tasks.evaluations_sync",
        "schedule": env.float("MRL_EVAL_SYNC_SECONDS", default=5.0),
    },
    # Packs finished runs' series for comparisons (scheduler/packing.py), on its own tick:
    # a slow pack never delays the status sync. The name is scheduler.dispatch.SERIES_PACK.
    "series-pack": {
        "task": "scheduler.tasks.series_pack",
        "schedule": env.float("MRL_SERIES_PACK_SECONDS", default=5.0),
    },
    # Drops the raw points of old packed runs when MRL_RAW_POINT_RETENTION_DAYS is set
    # (scheduler/packing.py; a no-op otherwise). The name is scheduler.dispatch.POINTS_RETENTION.
    "points-retention": {
        "task": "scheduler.tasks.points_retention",
        "schedule": 3600.0,
    },
    # Reads the evaluation task files left pending by a lost message (scheduler.dispatch.
    # TASK_FILE_CHECKS_SYNC; the views send each check as it is asked for).
    "task-file-checks": {
        "task": "scheduler.tasks.task_file_checks_sync",
        "schedule": env.float("MRL_FILE_CHECKS_SYNC_SECONDS", default=30.0),
    },
}
# A worker that can no longer consume exits non-zero so that its supervisor starts a new
# one (scheduler/watchdog.py): after MRL_WORKER_STALL_SECONDS without a broker connection,
# or MRL_WORKER_STOP_GRACE_SECONDS into a shutdown caused by a failure.
WORKER_STALL_SECONDS = env.float("MRL_WORKER_STALL_SECONDS", default=60.0)
WORKER_STOP_GRACE_SECONDS = env.float("MRL_WORKER_STOP_GRACE_SECONDS", default=15.0)

# --- runs and executors ---------------------------------------------------------------
RUN_ROOT = Path(env.str("MRL_RUN_ROOT", default=str(VAR_DIR / "runs")))
EXECUTOR = env.str("MRL_EXECUTOR", default="local")
if EXECUTOR not in {"local", "slurm"}:
    raise environ.ImproperlyConfigured(f"MRL_EXECUTOR={EXECUTOR!r}; use 'local' or 'slurm'")
# At most this many local-backend jobs run at once (scheduler/local_slots.py); the rest
# wait queued, first come first served. Default: half the cores, at least 2.
LOCAL_MAX_JOBS = env.int("MRL_LOCAL_MAX_JOBS", default=max(2, (os.cpu_count() or 2) // 2))
if LOCAL_MAX_JOBS < 1:
    raise environ.ImproperlyConfigured(f"MRL_LOCAL_MAX_JOBS={LOCAL_MAX_JOBS}; use 1 or more")

# How jobs reach the trainer and the trainer reaches back: the Python (with the trainer
# installed) and checkout the job runs from, and the base URL of this app's ingestion API
# as seen from the compute nodes.
JOB_PYTHON = env.str("MRL_JOB_PYTHON", default=sys.executable)
JOB_WORKDIR = Path(env.str("MRL_JOB_WORKDIR", default=str(BASE_DIR)))
INGEST_BASE_URL = env.str("MRL_INGEST_BASE_URL", default="http://127.0.0.1:8000")
ZOO_DIR = env.str("MRL_ZOO_DIR", default="")
# Where a file task's train_path / val_path may live (webapp/registry/task_data.py;
# checked when an experiment is saved or imported and when a sweep is launched):
# comma-separated absolute directories, e.g. MRL_TASK_DATA_DIRS=/data/sets,/scratch/data.
# A file counts as inside when its real path (symlinks resolved) is. Empty, the default:
# any absolute path of a readable .jsonl / .json-lines / .parquet file.
TASK_DATA_DIRS: list[str] = [
    os.path.normpath(entry.strip())
    for entry in env.list("MRL_TASK_DATA_DIRS", default=[])
    if entry.strip()
]
if any(not entry.startswith("/") for entry in TASK_DATA_DIRS):
    raise environ.ImproperlyConfigured(
        f"MRL_TASK_DATA_DIRS={TASK_DATA_DIRS!r}: give absolute directories, comma-separated"
    )
# Where a model's or tokenizer's local directory may live (webapp/registry/sources.py),
# judged like the task data: real paths, a path outside gets the same
# message as a missing one. Empty, the default: any directory the app can read.
MODEL_DIRS: list[str] = [
    os.path.normpath(entry.strip())
    for entry in env.list("MRL_MODEL_DIRS", default=[])
    if entry.strip()
]
if any(not entry.startswith("/") for entry in MODEL_DIRS):
    raise environ.ImproperlyConfigured(
        f"MRL_MODEL_DIRS={MODEL_DIRS!r}: give absolute directories, comma-separated"
    )

# --- recovery (scheduler/sync.py, scheduler/submit.py; beat's runs_sync applies them) ---
# A queued run nobody claimed (its message lost with the broker) is sent again after
# MRL_STALE_QUEUED_SECONDS. A claimed run whose job id was never saved (the worker died
# during sbatch; its message comes back only after the broker's visibility timeout) is
# sent again MRL_STALE_SUBMIT_SECONDS after its last attempt: keep that above the longest
# retry backoff (120 s) plus an sbatch timeout (30 s), or a retry still waiting gets a
# second chain of retries beside it (never a second job: attempts hold the run's lock). A
# job the backend no longer reports is ended by its exit-code file only
# MRL_FORGOTTEN_GRACE_SECONDS after submission. A job killed at its time limit is
# resubmitted, resuming from its checkpoint, at most MRL_TIME_LIMIT_RESUMES times.
SCHEDULER_STALE_QUEUED_SECONDS = env.float("MRL_STALE_QUEUED_SECONDS", default=60.0)
SCHEDULER_STALE_SUBMIT_SECONDS = env.float("MRL_STALE_SUBMIT_SECONDS", default=300.0)
SCHEDULER_FORGOTTEN_GRACE_SECONDS = env.float("MRL_FORGOTTEN_GRACE_SECONDS", default=60.0)
SCHEDULER_TIME_LIMIT_RESUMES = env.int("MRL_TIME_LIMIT_RESUMES", default=3)
# Each series_pack tick (beat, every MRL_SERIES_PACK_SECONDS) packs the series of at most
# this many finished runs whose series are not all packed yet
# (webapp/metrics/series_packs.py): a read cache for comparisons.
PACK_RUNS_PER_SYNC = env.int("MRL_PACK_RUNS_PER_SYNC", default=10)
# Before packing, each tick rolls up the series of at most this many runs not packed yet,
# running ones included (webapp/metrics/series_rollups.py): block summaries that keep
# reads of long series and of just-finished runs' comparisons to a few thousand rows.
ROLLUP_RUNS_PER_SYNC = env.int("MRL_ROLLUP_RUNS_PER_SYNC", default=200)
# Retention (webapp/metrics/retention.py, issue 35): beat's points_retention drops, every
# hour, the raw points of runs finished more than this many days ago whose series are
# packed and rolled up (pages and exports then read the packs; each run keeps its clock
# series and its evaluations raw). Empty, the default: raw points are kept for ever.
_RAW_POINT_RETENTION = env.str("MRL_RAW_POINT_RETENTION_DAYS", default="")
try:
    RAW_POINT_RETENTION_DAYS: float | None = (
        float(_RAW_POINT_RETENTION) if _RAW_POINT_RETENTION.strip() else None
    )
except ValueError as exc:
    raise environ.ImproperlyConfigured(
        f"MRL_RAW_POINT_RETENTION_DAYS={_RAW_POINT_RETENTION!r}: give a number of days"
    ) from exc
if RAW_POINT_RETENTION_DAYS is not None and RAW_POINT_RETENTION_DAYS < 0:
    raise environ.ImproperlyConfigured(
        f"MRL_RAW_POINT_RETENTION_DAYS={_RAW_POINT_RETENTION!r}: give 0 or more days"
    )

# --- figure exports (webapp/compare/export_render.py, issue 44) ---------------------
# Each export figure is drawn in a child process with these limits: CPU seconds of
# drawing, address space (MB), and wall-clock seconds in all; a child past one is
# stopped and the export answered 503 naming the limit. The worst figure the caps of
# webapp/compare/export_limits.py allow draws in a few seconds (bench/RESULTS.md).
EXPORT_RENDER_CPU_SECONDS = env.int("MRL_EXPORT_RENDER_CPU_SECONDS", default=20)
EXPORT_RENDER_MEMORY_MB = env.int("MRL_EXPORT_RENDER_MEMORY_MB", default=1024)
EXPORT_RENDER_WALL_SECONDS = env.float("MRL_EXPORT_RENDER_WALL_SECONDS", default=30.0)
if min(EXPORT_RENDER_CPU_SECONDS, EXPORT_RENDER_MEMORY_MB, EXPORT_RENDER_WALL_SECONDS) <= 0:
    raise environ.ImproperlyConfigured(
        "MRL_EXPORT_RENDER_CPU_SECONDS, MRL_EXPORT_RENDER_MEMORY_MB and "
        "MRL_EXPORT_RENDER_WALL_SECONDS: give positive numbers"
    )

# --- slurm defaults (per-experiment forms may override) ------------------------------
SLURM_PARTITION = env.str("SLURM_PARTITION", default="")
SLURM_ACCOUNT = env.str("SLURM_ACCOUNT", default="")
SLURM_QOS = env.str("SLURM_QOS", default="")
SLURM_TIME_LIMIT = env.str("SLURM_TIME_LIMIT", default="24:00:00")
SLURM_GPUS_PER_NODE = env.int("SLURM_GPUS_PER_NODE", default=8)

# The partitions the experiment form offers, with their capacity (the form refuses a
# request that does not fit, and MWRA plans within it). JSON in MRL_PARTITIONS, e.g.
# {"gpu": {"nodes": 4, "gpus_per_node": 8, "cpus_per_node": 64, "mem_gb_per_node": 512,
#          "python": "/opt/gpu-env/bin/python"}}.
# The numbers are ints; the optional "python" (a str) is the Python that Slurm jobs on
# that partition run (e.g. the GPU nodes' environment) instead of MRL_JOB_PYTHON: a plain
# absolute path of [A-Za-z0-9_./+-], else the run's job spec fails naming "python"
# (scheduler/run_job.py job_python). "local" is this machine (the local executor, CPU
# only; it always runs MRL_JOB_PYTHON).
PARTITIONS: dict[str, dict[str, int | str]] = {
    "local": {
        "nodes": 1,
        "gpus_per_node": 0,
        "cpus_per_node": os.cpu_count() or 1,
        "mem_gb_per_node": 16,
    },
    **env.json("MRL_PARTITIONS", default={}),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}
