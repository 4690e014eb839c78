"""Every environment variable that ``webapp/settings.py`` reads, declared in one place.

Each entry says the variable's name, its default as a user sees it and what it does, in
Markdown. ``docs/ENVIRONMENT.md`` is generated from this list, never edited by hand::

    python -m webapp.env_vars > docs/ENVIRONMENT.md

``tests/test_environment_documented.py`` reads the settings' source and fails when they
read a variable not declared here, when a declared one is no longer read, when a plain
literal default here disagrees with the settings', or when the generated file is stale.

Pure Python on purpose: no Django import, so the table can be written without settings.
"""

from __future__ import annotations

import sys
from typing import NamedTuple


class EnvVar(NamedTuple):
    name: str
    default: str
    help: str
    area: str


ENV_VARS: tuple[EnvVar, ...] = (
    # --- core -----------------------------------------------------------------------
    EnvVar(
        "MRL_PRODUCTION",
        "`false`",
        "production mode: `DEBUG` off, secure and HttpOnly cookies, HTTPS redirect, HSTS; "
        "refuses to start without a strong `SECRET_KEY` or with `DEBUG=true`. A boolean is "
        "read strictly (`true`/`false`, `1`/`0`, `yes`/`no`, `on`/`off`): a typo stops startup",
        "core",
    ),
    EnvVar(
        "MRL_VAR_DIR",
        "`var/` in the checkout",
        "where the app keeps its local state: the dev secret key, the demo's SQLite "
        "database and broker, collected static files, and (by default) the run directories",
        "core",
    ),
    EnvVar(
        "SECRET_KEY",
        "generated once into `<MRL_VAR_DIR>/secret_key` (not in production)",
        "Django's secret; production needs 50+ random characters, e.g. "
        "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`",
        "core",
    ),
    EnvVar(
        "DEBUG",
        "`true`, or `false` with `MRL_PRODUCTION=true`",
        "Django's debug pages (strict boolean); `true` is refused in production. Off, "
        "WhiteNoise serves the static files",
        "core",
    ),
    EnvVar(
        "ALLOWED_HOSTS",
        "`localhost,127.0.0.1,[::1]`",
        "comma-separated host names the app answers to",
        "core",
    ),
    EnvVar(
        "CSRF_TRUSTED_ORIGINS",
        "empty",
        "comma-separated origins (e.g. `https://mrl.example.org`) trusted for unsafe "
        "requests in addition to the request's own host",
        "core",
    ),
    EnvVar(
        "LOG_LEVEL",
        "`INFO`",
        "the root logger's level (console)",
        "core",
    ),
    # --- database -------------------------------------------------------------------
    EnvVar(
        "DATABASE_URL",
        "`sqlite:///<MRL_VAR_DIR>/demo.sqlite3`",
        "the database, e.g. `postgres://mrl@db:5432/mrl` (the test suite needs PostgreSQL)",
        "database",
    ),
    EnvVar(
        "DATABASE_CONN_MAX_AGE",
        "`60`",
        "seconds a database connection is kept for reuse (`0`: one per request)",
        "database",
    ),
    EnvVar(
        "DATABASE_CONN_HEALTH_CHECKS",
        "`true`",
        "check a kept connection before a request uses it, so that the first request "
        "after a database restart does not fail (strict boolean)",
        "database",
    ),
    # --- login throttling ----------------------------------------------------------
    EnvVar(
        "MRL_LOGIN_FAILURE_LIMIT",
        "`10`",
        "failed logins (the site's and the admin's) after which django-axes locks out the "
        "user name, from every address, and the client address, for every user name: "
        "either count locks. The lock-out page says when to try again",
        "login throttling",
    ),
    EnvVar(
        "MRL_LOGIN_COOLOFF_MINUTES",
        "`15`",
        "how long a lock-out lasts, counted from the last attempt (an attempt during a "
        "lock-out counts too); a successful login clears its user name's failures",
        "login throttling",
    ),
    EnvVar(
        "MRL_TRUSTED_PROXY_COUNT",
        "`0`",
        "how many reverse proxies in front of the app append the client's address to "
        "`X-Forwarded-For` (login throttling counts failures per address). `0`: the TCP "
        "peer's address, which a client cannot forge; set it only behind such proxies "
        "(behind one, the right-most `X-Forwarded-For` entry is the client), never without "
        "one, or a client picks its own address",
        "login throttling",
    ),
    # --- production hardening -------------------------------------------------------
    EnvVar(
        "SECURE_SSL_REDIRECT",
        "`true`",
        "with `MRL_PRODUCTION=true` only: redirect plain HTTP to HTTPS (strict boolean)",
        "production",
    ),
    EnvVar(
        "SECURE_HSTS_SECONDS",
        "`31536000` (one year)",
        "with `MRL_PRODUCTION=true` only: the HSTS max-age sent to browsers",
        "production",
    ),
    # --- celery ---------------------------------------------------------------------
    EnvVar(
        "CELERY_BROKER_URL",
        "the embedded broker, `mrl-sqlite+sqlite:///<MRL_VAR_DIR>/broker.sqlite3`",
        "Celery's broker, e.g. `redis://redis:6379/0`; `filesystem://` is refused",
        "celery",
    ),
    EnvVar(
        "MRL_BROKER_POLLING_SECONDS",
        "`0.5`",
        "how often an idle worker looks at the embedded broker's queue",
        "celery",
    ),
    EnvVar(
        "CELERY_RESULT_BACKEND",
        "empty: results are not stored",
        "where Celery stores task results",
        "celery",
    ),
    EnvVar(
        "CELERY_TASK_DEFAULT_QUEUE",
        "`celery`",
        "the queue tasks go to",
        "celery",
    ),
    EnvVar(
        "MRL_WORKER_HEARTBEAT_SECONDS",
        "`30`",
        "how often beat asks a Celery worker to report in",
        "celery",
    ),
    EnvVar(
        "MRL_WORKER_OFFLINE_AFTER_SECONDS",
        "`90`",
        "with no report for this long, the dashboard, the run, experiment and sweep pages "
        "and the launch message say no worker is running (the pages poll "
        "`GET /api/v1/worker` and update without a reload); keep it a few heartbeats above "
        "`MRL_WORKER_HEARTBEAT_SECONDS`",
        "celery",
    ),
    EnvVar(
        "MRL_STATUS_SYNC_SECONDS",
        "`5`",
        "how often beat syncs run states with the backends (and re-sends lost runs)",
        "celery",
    ),
    EnvVar(
        "MRL_EVAL_SYNC_SECONDS",
        "`5`",
        "how often beat follows evaluation jobs and queues automatic evaluations",
        "celery",
    ),
    EnvVar(
        "MRL_SERIES_PACK_SECONDS",
        "`5`",
        "how often beat rolls up and packs finished runs' series (the comparisons' read cache)",
        "celery",
    ),
    EnvVar(
        "MRL_FILE_CHECKS_SYNC_SECONDS",
        "`30`",
        "how often beat re-runs the evaluation task file checks left pending by a lost message",
        "celery",
    ),
    EnvVar(
        "MRL_WORKER_STALL_SECONDS",
        "`60`",
        "a worker whose consumer has had no broker connection for this long exits "
        "(code 75) so that its supervisor starts a fresh one",
        "celery",
    ),
    EnvVar(
        "MRL_WORKER_STOP_GRACE_SECONDS",
        "`15`",
        'a worker stopping after a failure ("Unrecoverable error") that has not exited '
        "after this long is ended with its exit code",
        "celery",
    ),
    # --- runs and executors ---------------------------------------------------------
    EnvVar(
        "MRL_RUN_ROOT",
        "`<MRL_VAR_DIR>/runs`",
        "where run directories (config, spool, checkpoints) live; with Slurm, the same "
        "path on the web app's host and the compute nodes",
        "runs",
    ),
    EnvVar(
        "MRL_EXECUTOR",
        "`local`",
        "the backend of a run whose experiment names none: `local` or `slurm` (anything "
        "else stops startup)",
        "runs",
    ),
    EnvVar(
        "MRL_LOCAL_MAX_JOBS",
        "half the cores, at least 2",
        "local-backend jobs that run at once; further runs wait queued (their status says "
        "so) and start, oldest first, as those end; the sweep form says so",
        "runs",
    ),
    EnvVar(
        "MRL_JOB_PYTHON",
        "the Python running the app",
        "the Python a job runs `python -m trainer` with (unless its Slurm partition names "
        "its own `python` in `MRL_PARTITIONS`)",
        "runs",
    ),
    EnvVar(
        "MRL_JOB_WORKDIR",
        "this checkout",
        "the directory a job runs from",
        "runs",
    ),
    EnvVar(
        "MRL_INGEST_BASE_URL",
        "`http://127.0.0.1:8000`",
        "this app as the compute nodes see it (jobs post metrics there)",
        "runs",
    ),
    EnvVar(
        "MRL_ZOO_DIR",
        "unset: the trainer's `~/.cache/mutual-rl-lab/zoo`",
        "the tiny zoo, for jobs (exported to them) and the trainer",
        "runs",
    ),
    EnvVar(
        "MRL_PARTITIONS",
        "a `local` partition only",
        "JSON: partition -> `nodes`, `gpus_per_node`, `cpus_per_node`, `mem_gb_per_node` "
        "(the form checks requests against it), and optionally `python`: the absolute path "
        "of the Python that Slurm jobs on that partition run (e.g. the GPU nodes' "
        "environment), instead of `MRL_JOB_PYTHON`; a path with spaces or shell characters "
        "fails the run's job naming `python`",
        "runs",
    ),
    # --- task data ------------------------------------------------------------------
    EnvVar(
        "MRL_TASK_DATA_DIRS",
        "empty: anywhere readable but the app's own files",
        "comma-separated absolute directories that a file task's `train_path` / "
        "`val_path`, an evaluation suite's file and its task files must lie in (real path; "
        "checked at save, import and sweep launch, and on every suite page); a path "
        "outside, missing or unreadable gets one message; a relative entry stops startup. "
        "`manage.py check --deploy` warns while it is unset (see docs/RELIABILITY.md, "
        '"Threat model")',
        "task data",
    ),
    EnvVar(
        "MRL_MODEL_DIRS",
        "empty: anywhere readable",
        "the same for local model and tokenizer directories (registry entries, a pool's "
        "model field)",
        "task data",
    ),
    # --- recovery -------------------------------------------------------------------
    EnvVar(
        "MRL_STALE_QUEUED_SECONDS",
        "`60`",
        "a queued run nobody claimed (its message lost with the broker) is sent again "
        "after this long",
        "recovery",
    ),
    EnvVar(
        "MRL_STALE_SUBMIT_SECONDS",
        "`300`",
        "a claimed run whose job id was never saved is sent again this long after its "
        "last attempt; keep it above 150 (the longest retry backoff plus an sbatch timeout)",
        "recovery",
    ),
    EnvVar(
        "MRL_FORGOTTEN_GRACE_SECONDS",
        "`60`",
        "a job the backend no longer reports is ended by its exit-code file only this long "
        "after submission",
        "recovery",
    ),
    EnvVar(
        "MRL_TIME_LIMIT_RESUMES",
        "`3`",
        "how many times a job killed at its time limit is resubmitted, resuming from its "
        "checkpoint",
        "recovery",
    ),
    EnvVar(
        "MRL_PACK_RUNS_PER_SYNC",
        "`10`",
        "each series-pack tick packs the series of at most this many finished runs",
        "recovery",
    ),
    EnvVar(
        "MRL_ROLLUP_RUNS_PER_SYNC",
        "`200`",
        "each series-pack tick first rolls up the series of at most this many runs not "
        "packed yet, running ones included",
        "recovery",
    ),
    EnvVar(
        "MRL_RAW_POINT_RETENTION_DAYS",
        "empty: off, raw points kept",
        "days after a run finished when beat (hourly) drops its raw points, once its "
        "series are packed and rolled up; pages and exports then read the packs, and each "
        "run keeps its clock series (`_pool` `perf/step_s`) and its evaluations raw "
        "(`manage.py drop_packed_points` does it by hand; docs/CAPACITY.md)",
        "recovery",
    ),
    # --- figure exports ---------------------------------------------------------------
    EnvVar(
        "MRL_EXPORT_RENDER_CPU_SECONDS",
        "`20`",
        "CPU seconds an export's figure may take to draw (each is drawn in a child "
        "process); past it the child is stopped and the export answered 503 naming the "
        "limit",
        "exports",
    ),
    EnvVar(
        "MRL_EXPORT_RENDER_MEMORY_MB",
        "`1024`",
        "address space (MB) of the child process that draws an export's figure; an "
        "allocation past it stops the drawing (503)",
        "exports",
    ),
    EnvVar(
        "MRL_EXPORT_RENDER_WALL_SECONDS",
        "`30`",
        "wall-clock seconds an export's figure child may run in all (start included) "
        "before it is killed (503); what one export request can hold a web thread for",
        "exports",
    ),
    # --- slurm defaults (per-experiment forms may override) -------------------------
    EnvVar(
        "SLURM_PARTITION",
        "empty: the cluster's default",
        "the partition of submitted jobs",
        "slurm",
    ),
    EnvVar(
        "SLURM_ACCOUNT",
        "empty: the cluster's default",
        "the account of submitted jobs",
        "slurm",
    ),
    EnvVar(
        "SLURM_QOS",
        "empty: the cluster's default",
        "the QOS of submitted jobs",
        "slurm",
    ),
    EnvVar(
        "SLURM_TIME_LIMIT",
        "`24:00:00`",
        "the time limit of submitted jobs",
        "slurm",
    ),
    EnvVar(
        "SLURM_GPUS_PER_NODE",
        "`8`",
        "the GPUs per node of submitted jobs",
        "slurm",
    ),
)


def _cell(text: str) -> str:
    """``text`` as one Markdown table cell: pipes escaped, whitespace on one line."""
    return " ".join(text.replace("|", "\\|").split())


def markdown() -> str:
    """docs/ENVIRONMENT.md: one table of :data:`ENV_VARS`, in declaration order."""
    lines = [
        "# Environment variables",
        "",
        "<!-- Generated from webapp/env_vars.py by "
        "`python -m webapp.env_vars > docs/ENVIRONMENT.md`; do not edit. -->",
        "",
        f"`webapp/settings.py` reads these {len(ENV_VARS)} variables, and no others "
        "(`tests/test_environment_documented.py` checks it). Every one has a safe local "
        "default, so `make demo` runs with none set; `docker/compose.yml` shows a "
        "production set.",
        "",
        "| variable | area | default | what it does |",
        "| --- | --- | --- | --- |",
    ]
    lines += [
        f"| `{var.name}` | {_cell(var.area)} | {_cell(var.default)} | {_cell(var.help)} |"
        for var in ENV_VARS
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
