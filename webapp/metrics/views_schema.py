"""``GET /api/v1/schema``: the API described in OpenAPI 3.1 (served as JSON).

The ingest request's components (``Point``, ``Event``, ``Sample``, ``Status``, ``Batch``)
are the wire contract's records (:func:`trainer.wire.json_schemas`): the definitions the
batch parser checks against. The rest is written here, its limits taken from the code
that enforces them (:mod:`trainer.wire`, :mod:`webapp.metrics.views`). The event kinds are
whatever the registered sharing regimes declare when the document is asked for:
:func:`openapi` builds it for the kinds of the moment (cached per set of kinds), and the
module attribute ``OPENAPI`` is :func:`openapi` read on access.
``tests/webapp/metrics/test_fuzz_ingest.py`` checks real replies and every route of
``webapp/metrics/api_urls.py`` against this description. Public: it holds no data. JSON Schema
notes: ``integer`` means an integer literal (``12``, not ``12.0``); no string may contain
a NUL character or a lone surrogate.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import cache_control

from trainer import wire
from webapp.core.http import allow_methods, json_reply
from webapp.metrics import history, views, views_runs
from webapp.runs import api_query

NO_NUL = wire.NO_NUL


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _int(low: int, high: int | None, description: str) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "minimum": low, "description": description}
    if high is not None:
        schema["maximum"] = high
    return schema


def _kind(kinds: tuple[str, ...]) -> dict[str, Any]:
    return {"type": "string", "enum": list(kinds)}


def _reply_schemas(kinds: tuple[str, ...]) -> dict[str, Any]:
    """The components of the replies (the reads' event rows list ``kinds``)."""
    return {
        "Counts": {
            "type": "object",
            "additionalProperties": False,
            "required": ["accepted", "duplicates"],
            "properties": {
                "accepted": {"type": "integer", "minimum": 0},
                "duplicates": {"type": "integer", "minimum": 0},
            },
        },
        "IngestReply": {
            "type": "object",
            "additionalProperties": False,
            "required": ["accepted", "duplicates", "points", "events"],
            "properties": {
                "accepted": {"type": "integer", "minimum": 0, "description": "New points + events"},
                "duplicates": {"type": "integer", "minimum": 0, "description": "Already stored"},
                "points": _ref("Counts"),
                "events": _ref("Counts"),
                "status": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["state", "applied"],
                    "properties": {
                        "state": {"type": "string", "description": "The run's state now"},
                        "applied": {"type": "boolean"},
                        "reason": {"type": "string", "description": "Why the state stayed"},
                    },
                },
            },
        },
        "Error": {
            "type": "object",
            "additionalProperties": False,
            "required": ["error"],
            "properties": {
                "error": {
                    "type": "string",
                    "description": "What is wrong; names the field, e.g. points[3].value: ...",
                }
            },
        },
        "Value": wire.value_schema('A metric value: a number, "NaN", "Infinity" or "-Infinity"'),
        "Series": {
            "type": "object",
            "additionalProperties": False,
            "required": ["run", "max_points", "after_step", "series"],
            "properties": {
                "run": {"type": "integer"},
                "max_points": {"type": "integer"},
                "after_step": {"type": ["integer", "null"]},
                "series": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["policy", "key", "n_points", "downsampled", "points"],
                        "properties": {
                            "policy": {"type": "string"},
                            "key": {"type": "string"},
                            "n_points": {"type": "integer", "minimum": 0},
                            "downsampled": {"type": "boolean"},
                            "points": {
                                "type": "array",
                                "description": "[step, value] pairs by step",
                                "items": {
                                    "type": "array",
                                    "minItems": 2,
                                    "maxItems": 2,
                                    "prefixItems": [{"type": "integer"}, _ref("Value")],
                                },
                            },
                        },
                    },
                },
            },
        },
        "Keys": {
            "type": "object",
            "additionalProperties": False,
            "required": ["run", "keys"],
            "properties": {
                "run": {"type": "integer"},
                "keys": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["policy", "key", "n_points", "last_step", "last_value"],
                        "properties": {
                            "policy": {"type": "string"},
                            "key": {"type": "string"},
                            "n_points": {"type": "integer", "minimum": 0},
                            "last_step": {"type": ["integer", "null"]},
                            "last_value": {"oneOf": [_ref("Value"), {"type": "null"}]},
                        },
                    },
                },
            },
        },
        "Events": {
            "type": "object",
            "additionalProperties": False,
            "required": ["run", "total", "limit", "offset", "events"],
            "properties": {
                "run": {"type": "integer"},
                "total": {"type": "integer", "minimum": 0},
                "limit": {"type": "integer"},
                "offset": {"type": "integer"},
                "events": {"type": "array", "items": _ref("EventRow")},
            },
        },
        "EventRow": {
            "type": "object",
            "additionalProperties": False,
            "required": [
                *("id", "step", "source", "target"),
                *("kind", "prompt_id", "count", "weight", "has_samples"),
            ],
            "properties": {
                "id": {"type": "integer"},
                "step": {"type": "integer"},
                "source": {"type": "string"},
                "target": {"type": "string"},
                "kind": _kind(kinds),
                "prompt_id": {"type": "string"},
                "count": {"type": "integer"},
                "weight": {"type": ["number", "null"]},
                "has_samples": {
                    "type": "boolean",
                    "description": "Whether what crossed was recorded (the event's detail)",
                },
            },
        },
        "EventDetail": {
            "type": "object",
            "additionalProperties": False,
            "required": ["run", "regime", "event", "prompt_text", "samples", "no_text", "limits"],
            "properties": {
                "run": {"type": "integer"},
                "regime": {"type": "string"},
                "event": _ref("EventRow"),
                "prompt_text": {
                    "description": "The text of the event's prompt, rebuilt from the run's "
                    "task and seed (events store its id only); null when it cannot be",
                    "type": ["string", "null"],
                },
                "no_text": {
                    "description": "What to say instead of samples for a kind that never "
                    "carries text (its regime's declaration); null otherwise",
                    "type": ["string", "null"],
                },
                "samples": {
                    "description": "What crossed; null: not recorded (an older trainer)",
                    "oneOf": [{"type": "array", "items": _ref("Sample")}, {"type": "null"}],
                },
                "limits": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["samples", "text", "tokens"],
                    "properties": {
                        "samples": {"const": wire.MAX_EVENT_SAMPLES},
                        "text": {"const": wire.MAX_SAMPLE_TEXT},
                        "tokens": {"const": wire.MAX_SAMPLE_TOKENS},
                    },
                },
            },
        },
        "EventsSummary": {
            "type": "object",
            "additionalProperties": False,
            "required": [
                *("run", "policies", "matrix", "kinds"),
                *("total", "bucket_size", "over_time"),
            ],
            "properties": {
                "run": {"type": "integer"},
                "policies": {"type": "array", "items": {"type": "string"}},
                "matrix": {
                    "type": "array",
                    "description": "[source index][target index] -> summed count",
                    "items": {"type": "array", "items": {"type": "integer"}},
                },
                "kinds": {"type": "array", "items": {"type": "string"}},
                "total": {"type": "integer", "minimum": 0},
                "bucket_size": {"type": "integer", "minimum": 1},
                "over_time": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["step", "kind", "count"],
                        "properties": {
                            "step": {"type": "integer"},
                            "kind": {"type": "string"},
                            "count": {"type": "integer"},
                        },
                    },
                },
            },
        },
        "RunStatus": {
            "type": "object",
            "additionalProperties": False,
            "required": [
                *("run", "name", "state", "is_terminal", "status_message", "last_step"),
                *("backend", "slurm_job_id", "node", "worker_nodes", "exit_code"),
                *("failure_reason", "has_token", "created_at", "queued_at", "submitted_at"),
                *("started_at", "finished_at", "updated_at"),
                *("total_steps", "elapsed_s", "eta_s", "steps_per_s", "progress"),
                *("progress_text", "timeline"),
            ],
            "properties": {
                "run": {"type": "integer"},
                "name": {"type": "string"},
                "state": {"type": "string"},
                "is_terminal": {"type": "boolean"},
                "status_message": {"type": "string"},
                "last_step": {"type": ["integer", "null"]},
                "backend": {
                    "type": "string",
                    "description": "slurm, local, or empty before submission",
                },
                "has_token": {
                    "type": "boolean",
                    "description": "Whether an ingestion token is issued",
                },
                "total_steps": {
                    "type": ["integer", "null"],
                    "description": "From the run's config",
                },
                "elapsed_s": {
                    "type": ["number", "null"],
                    "description": "Seconds since the start; the duration once finished",
                },
                "eta_s": {
                    "type": ["number", "null"],
                    "description": "Seconds left at the last steps' rate; null when unknown",
                },
                "steps_per_s": {"type": ["number", "null"], "description": "The last steps' rate"},
                "progress": {"type": "number", "minimum": 0, "maximum": 1},
                "progress_text": {"type": "string", "description": "What the run page shows"},
                "timeline": {
                    "type": "array",
                    "description": "The run's state changes, oldest first",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["at", "state", "note"],
                        "properties": {
                            "at": {"type": "string", "format": "date-time"},
                            "state": {"type": "string"},
                            "note": {"type": "string"},
                        },
                    },
                },
                "slurm_job_id": {"type": "string"},
                "node": {"type": "string", "description": "Where the batch script ran"},
                "worker_nodes": {
                    "type": "string",
                    "description": "Where each policy ran, in pool order: 'a on node1, b on "
                    "node2' (empty before any worker started)",
                },
                "exit_code": {"type": ["integer", "null"]},
                "failure_reason": {"type": "string"},
                **{
                    name: {"type": ["string", "null"], "format": "date-time"}
                    for name in (
                        *("created_at", "queued_at", "submitted_at"),
                        *("started_at", "finished_at", "updated_at"),
                    )
                },
            },
        },
        "WorkerStatus": {
            "type": "object",
            "description": "Whether a Celery worker reported in within offline_after_seconds "
            "(MRL_WORKER_OFFLINE_AFTER_SECONDS); beat asks for a report every "
            "MRL_WORKER_HEARTBEAT_SECONDS.",
            "additionalProperties": False,
            "required": [
                *("online", "last_seen", "seconds_since"),
                *("offline_after_seconds", "message"),
            ],
            "properties": {
                "online": {"type": "boolean"},
                "last_seen": {
                    "type": ["string", "null"],
                    "format": "date-time",
                    "description": "The latest heartbeat; null if no worker ever reported",
                },
                "seconds_since": {"type": ["number", "null"], "minimum": 0},
                "offline_after_seconds": {"type": "number", "exclusiveMinimum": 0},
                "message": {
                    "type": "string",
                    "description": '"" when online, else e.g. "No worker has been seen for '
                    '3 min" or "No worker has reported yet"',
                },
            },
        },
        "Comparison": {
            "type": "object",
            "description": "The compare page's curves (webapp.compare.serialize.comparison_json).",
        },
        "SavedComparisonData": {
            "type": "object",
            "additionalProperties": False,
            "required": ["saved", "selection", "comparison"],
            "properties": {
                "saved": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["id", "slug", "name", "owner", "query", "page"],
                    "properties": {
                        "id": {"type": "integer"},
                        "slug": {"type": "string"},
                        "name": {"type": "string"},
                        "owner": {"type": "string"},
                        "query": {"type": "string", "description": "The compare page's query"},
                        "page": {"type": "string", "description": "The saved page's URL"},
                    },
                },
                "selection": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["description", "runs", "truncated"],
                    "properties": {
                        "description": {"type": "string"},
                        "runs": {"type": "array", "items": {"type": "integer"}},
                        "truncated": {
                            "type": "boolean",
                            "description": "More runs matched than a comparison shows (200)",
                        },
                    },
                },
                "comparison": _ref("Comparison"),
            },
        },
        "MetricValues": {
            "type": "object",
            "additionalProperties": False,
            "required": ["final", "final_step", "best", "best_step", "n_points"],
            "properties": {
                "final": {
                    **_ref("Value"),
                    "description": "The value at the series' last step (NaN included)",
                },
                "final_step": {"type": "integer"},
                "best": {
                    "oneOf": [_ref("Value"), {"type": "null"}],
                    "description": "The highest value (lowest with lower_is_better), NaN left "
                    "out; null when every value is NaN",
                },
                "best_step": {"type": ["integer", "null"]},
                "n_points": {"type": "integer", "minimum": 1},
            },
        },
        "RunRow": {
            "type": "object",
            "additionalProperties": False,
            "required": [
                *("id", "name", "experiment", "sweep", "lab", "owner", "state", "regime"),
                *("off_policy", "seed", "policies", "tags", "config", "last_step"),
                *("created_at", "queued_at", "submitted_at", "started_at", "finished_at"),
                *("duration_s", "metrics", "links"),
            ],
            "properties": {
                "id": {"type": "integer"},
                "name": {"type": "string"},
                "experiment": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["id", "name"],
                    "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
                },
                "sweep": {"type": ["integer", "null"]},
                "lab": {"type": "string"},
                "owner": {"type": "string", "description": "The experiment owner's username"},
                "state": {"type": "string"},
                "regime": {"type": "string"},
                "off_policy": {"type": "string"},
                "seed": {"type": "integer"},
                "policies": {"type": "array", "items": {"type": "string"}},
                "tags": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "The run's and its experiment's",
                },
                "config": {"type": "object", "description": "The trainer JSON the job read"},
                "last_step": {"type": ["integer", "null"]},
                **{
                    name: {"type": ["string", "null"], "format": "date-time"}
                    for name in (
                        *("created_at", "queued_at", "submitted_at"),
                        *("started_at", "finished_at"),
                    )
                },
                "duration_s": {
                    "type": ["number", "null"],
                    "description": "finished_at - started_at, once finished",
                },
                "metrics": {
                    "type": "object",
                    "description": "metric key -> policy -> its final and best value, for the "
                    "metric parameters (a series the run lacks is left out)",
                    "additionalProperties": {
                        "type": "object",
                        "additionalProperties": _ref("MetricValues"),
                    },
                },
                "links": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["page", "history", "events", "status"],
                    "properties": {
                        name: {"type": "string"} for name in ("page", "history", "events", "status")
                    },
                },
            },
        },
        "RunList": {
            "type": "object",
            "additionalProperties": False,
            "required": ["total", "count", "order", "limit", "next_cursor", "next", "runs"],
            "properties": {
                "total": {"type": "integer", "minimum": 0, "description": "Runs matching"},
                "count": {"type": "integer", "minimum": 0, "description": "Runs on this page"},
                "order": {"type": "string", "enum": list(api_query.ORDERS)},
                "limit": {"type": "integer"},
                "next_cursor": {"type": ["string", "null"]},
                "next": {
                    "type": ["string", "null"],
                    "description": "The next page's URL (these filters, the cursor); null on "
                    "the last page",
                },
                "runs": {"type": "array", "items": _ref("RunRow")},
            },
        },
        "History": {
            "type": "object",
            "additionalProperties": False,
            "required": ["run", "x", "max_points", "series", "notes"],
            "properties": {
                "run": {"type": "integer"},
                "x": {"type": "string", "enum": list(history.X_AXES)},
                "max_points": {"type": ["integer", "null"]},
                "notes": {"type": "array", "items": {"type": "string"}},
                "series": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["policy", "key", "n_points", "downsampled", "step", "value"],
                        "properties": {
                            "policy": {"type": "string"},
                            "key": {"type": "string"},
                            "n_points": {"type": "integer", "minimum": 0},
                            "downsampled": {"type": "boolean"},
                            "step": {"type": "array", "items": {"type": "integer"}},
                            "value": {"type": "array", "items": _ref("Value")},
                            "x": {
                                "type": "array",
                                "items": {"type": ["number", "null"]},
                                "description": "Not on the step axis: the policy's counter at "
                                "each step (null where unknown)",
                            },
                        },
                    },
                },
            },
        },
        "ComparisonSummary": {
            "type": "object",
            "description": "A summary table (webapp.compare.serialize.summary_json).",
        },
        "ComparisonBars": {
            "type": "object",
            "description": "A bar view of a comparison (webapp.compare.serialize.bars_json), "
            "or for view=significance its table (webapp.compare.serialize.significance_json: "
            "rows of policy, metric, group, interval {estimate, low, high, n, df, p, method, "
            "p_adjusted}, note and sentence).",
        },
    }


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": _ref("Error")}},
    }


def _reply(schema: str, description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(schema)}}}


RUN_ID = {
    "name": "run_id",
    "in": "path",
    "required": True,
    "schema": {"type": "integer", "minimum": 0},
}


def _query(name: str, schema: dict[str, Any], description: str = "", **extra: Any) -> dict:
    parameter = {"name": name, "in": "query", "required": False, "schema": schema, **extra}
    if description:
        parameter["description"] = description
    return parameter


def _text_query(name: str, max_length: int, description: str) -> dict[str, Any]:
    return _query(
        name,
        {"type": "string", "maxLength": max_length, "pattern": NO_NUL},
        description,
    )


READ_ERRORS = {
    "400": _error("A query parameter with a bad value (the message names it)"),
    "401": _error(
        "Not logged in (no redirect to the login page), or a wrong or revoked personal token"
    ),
    "404": _error("No such run, or a run outside the user's labs"),
    "405": _error("Another method than GET (the Allow header says which)"),
}


READ_SECURITY = [{"session": []}, {"personalToken": []}]


def _read(summary: str, reply: str, parameters: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "security": READ_SECURITY,
            "parameters": parameters,
            "responses": {"200": _reply(reply), **READ_ERRORS},
        }
    }


def _event_filters(kinds: tuple[str, ...]) -> list[dict[str, Any]]:
    """The query parameters of the transfer log and its summary."""
    return [
        _text_query("source", wire.MAX_POLICY_NAME, "Only from this policy"),
        _text_query("target", wire.MAX_POLICY_NAME, "Only to this policy"),
        _query("kind", _kind(kinds)),
        _query("step_min", _int(0, views.MAX_INT32, "From this step")),
        _query("step_max", _int(0, views.MAX_INT32, "To this step (>= step_min)")),
    ]


SPEC_QUERY = [
    _query(
        "runs",
        {"type": "string"},
        "Comma-separated run ids (or repeat run=ID); 1 to 200 runs the user may see",
    ),
    _query("group_by", {"type": "string"}, "regime, off_policy, experiment, seed, or a path"),
    _query("metric", {"type": "array", "items": {"type": "string"}}, "Repeatable"),
    _query("policy", {"type": "array", "items": {"type": "string"}}, "Repeatable"),
    _query("x", {"type": "string", "enum": ["step", "rollouts", "tokens", "wall_time"]}),
    _query("band", {"type": "string"}, "std, minmax, ci95 or none"),
    _query("smooth", {"type": "number", "minimum": 0, "exclusiveMaximum": 1}),
    _query("log_y", {"type": "string"}),
    _query("buckets", {"type": "integer"}),
]


def _runs_query() -> list[dict[str, Any]]:
    """The query parameters of ``GET /api/v1/runs`` (:mod:`webapp.runs.api_query`)."""
    repeatable = "repeatable: any of the values"
    return [
        _query("id", {"type": "integer"}, f"Run id; {repeatable}"),
        _query("experiment", {"type": "integer"}, f"Experiment id; {repeatable}"),
        _text_query("experiment_name", 64, f"Experiment name (exact); {repeatable}"),
        _query("sweep", {"type": "integer"}, f"Sweep id; {repeatable}"),
        _text_query("regime", 64, f"Sharing regime; {repeatable}"),
        _text_query("off_policy", 16, f"none or remix; {repeatable}"),
        _text_query("state", 16, f"Run state, e.g. completed; {repeatable}"),
        _query("seed", {"type": "integer"}, repeatable),
        _text_query("tag", 48, "The run or its experiment has this tag; repeatable: every tag"),
        _text_query("owner", 150, f"The experiment owner's username; {repeatable}"),
        _text_query("lab", 100, f"The lab's name or id; {repeatable}"),
        _query(
            "created_after",
            {"type": "string"},
            "ISO 8601 date or date-time (UTC without an offset): created at or after it",
        ),
        _query(
            "created_before",
            {"type": "string"},
            "ISO 8601 date (the whole day included) or date-time: created before it",
        ),
        {
            "name": "config.{path}",
            "in": "query",
            "required": False,
            "description": "A config field by dotted path, e.g. config.sgt.lambda_sgt=0.1 or "
            "config.pool.0.name=llama; the value is read as JSON where it parses, else as "
            f"text; {repeatable}. Suffix __gt, __gte, __lt or __lte for a numeric comparison "
            f"(config.grpo.kl_coef__gte=0.001). At most {api_query.MAX_CONFIG_FILTERS}.",
            "schema": {"type": "string"},
        },
        _text_query(
            "metric",
            wire.MAX_KEY,
            f"A metric whose final and best value each run carries; repeatable (at most "
            f"{views_runs.MAX_METRICS})",
        ),
        _text_query("policy", wire.MAX_POLICY_NAME, "Only these policies' values; repeatable"),
        _query("lower_is_better", {"type": "string"}, "1: best is the lowest value"),
        _query("order", {"type": "string", "enum": list(api_query.ORDERS)}, "Default: -id"),
        _query(
            "limit",
            _int(1, api_query.MAX_LIMIT, f"Runs a page (default {api_query.DEFAULT_LIMIT})"),
        ),
        _query("cursor", {"type": "string"}, "The next page's cursor (the reply's next link)"),
    ]


RUNS_QUERY = _runs_query()


def _paths(kinds: tuple[str, ...]) -> dict[str, Any]:
    """Every route, with what it takes and answers."""
    return {
        "/api/v1/runs/{run_id}/ingest": {
            "post": {
                "summary": "Send metrics, transfer events and a status report (SPEC 8.1)",
                "description": "Bulk and idempotent: a point is keyed by (run, policy, key, step), "
                "an event by (run, step, source, target, kind, prompt_id); a repeat is a "
                "duplicate and changes nothing. Everything is validated before anything is "
                "written: a rejected batch writes nothing. The token is checked before the "
                "body is read. The Content-Type is not checked: the body is read as UTF-8 JSON "
                "(no bare NaN/Infinity literals).",
                "security": [{"runToken": []}],
                "parameters": [RUN_ID],
                "requestBody": {
                    "required": False,
                    "content": {"application/json": {"schema": _ref("Batch")}},
                },
                "responses": {
                    "200": _reply("IngestReply", "Stored; the counts say what was new"),
                    "400": _error(
                        "Malformed JSON, an unknown field, a wrong type, an over-long name "
                        "(the message names the field)"
                    ),
                    "401": {
                        **_error("No, a wrong or a revoked run token"),
                        "headers": {
                            "WWW-Authenticate": {
                                "schema": {"type": "string", "const": 'Bearer realm="ingest"'}
                            }
                        },
                    },
                    "403": _error("A valid token of another run (whether or not run_id exists)"),
                    "405": _error("Another method than POST"),
                    "413": _error(
                        f"More than {wire.MAX_POINTS} points or {wire.MAX_EVENTS} events, or a "
                        f"body over {views.MAX_BODY_BYTES} bytes"
                    ),
                },
            }
        },
        "/api/v1/runs": _read(
            "The runs the user may see, filtered, a cursor page at a time (newest first), "
            "with the final and best value of chosen metrics",
            "RunList",
            RUNS_QUERY,
        ),
        "/api/v1/runs/{run_id}/history": _read(
            "Several metrics of a run at once, against step, rollouts or response tokens: "
            "every point, or min/max buckets that keep the extremes",
            "History",
            [
                RUN_ID,
                _text_query("key", wire.MAX_KEY, "Metric; repeatable; none: every metric"),
                _text_query(
                    "policy", wire.MAX_POLICY_NAME, "Policy; repeatable; none: every policy"
                ),
                _query("x", {"type": "string", "enum": list(history.X_AXES)}, "Default: step"),
                _query(
                    "max_points",
                    _int(
                        4,
                        views_runs.MAX_HISTORY_POINTS,
                        "Downsample to at most this many points per series; absent: every point",
                    ),
                ),
                _query("after_step", _int(-1, views.MAX_INT32, "Only points with a larger step")),
            ],
        ),
        "/api/v1/runs/{run_id}/series": _read(
            "A run's curves, downsampled in SQL (every bucket keeps its min and max)",
            "Series",
            [
                RUN_ID,
                _text_query("key", wire.MAX_KEY, "Metric; repeatable; none: every metric"),
                _text_query(
                    "policy", wire.MAX_POLICY_NAME, "Policy; repeatable; none: every policy"
                ),
                _query(
                    "max_points",
                    _int(4, views.MAX_MAX_POINTS, "At most this many points per trace"),
                ),
                _query(
                    "after_step",
                    _int(-1, views.MAX_INT32, "Only points with a larger step"),
                ),
            ],
        ),
        "/api/v1/runs/{run_id}/keys": _read(
            "Every (policy, key) of a run with its size, last step and value", "Keys", [RUN_ID]
        ),
        "/api/v1/runs/{run_id}/events": _read(
            "The peer-transfer log, by step",
            "Events",
            [
                RUN_ID,
                *_event_filters(kinds),
                _query("limit", _int(1, views.MAX_EVENTS_LIMIT, "Page size")),
                _query("offset", _int(0, None, "Events to skip")),
            ],
        ),
        "/api/v1/runs/{run_id}/events/summary": _read(
            "Transfer counts of the events that pass the log's filters: source x target "
            "matrix, and per step bucket x kind",
            "EventsSummary",
            [
                RUN_ID,
                *_event_filters(kinds),
                _query("buckets", _int(1, views.MAX_SUMMARY_BUCKETS, "Step buckets")),
            ],
        ),
        "/api/v1/runs/{run_id}/events/{event_id}": _read(
            "One transfer event with what crossed (response texts, retokenized tokens)",
            "EventDetail",
            [
                RUN_ID,
                {
                    "name": "event_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "integer", "minimum": 0},
                },
            ],
        ),
        "/api/v1/runs/{run_id}/status": _read(
            "The run's state, facts and timestamps", "RunStatus", [RUN_ID]
        ),
        "/api/v1/compare": _read(
            "Curves of a comparison (the compare page)", "Comparison", SPEC_QUERY
        ),
        "/api/v1/compare/summary": _read(
            "A comparison's summary table of one metric",
            "ComparisonSummary",
            [
                *SPEC_QUERY,
                _query("table_metric", {"type": "string"}, "Default: the last metric"),
                _query("lower_is_better", {"type": "string"}, "1: lower values are better"),
            ],
        ),
        "/api/v1/compare/saved/{ref}": _read(
            "A saved comparison's curves as its page draws them when opened (the selection "
            "resolved now; the page's view settings)",
            "SavedComparisonData",
            [
                {
                    "name": "ref",
                    "in": "path",
                    "required": True,
                    "description": "The saved comparison's slug (the end of its page's "
                    "address) or id",
                    "schema": {"type": "string"},
                }
            ],
        ),
        "/api/v1/compare/bars": _read(
            "A comparison's bar view: per-task evaluation, relative improvement, or the "
            "significance of each group's difference to the baseline (paired t or Welch "
            "interval, Holm-adjusted p, one sentence per comparison)",
            "ComparisonBars",
            [
                *SPEC_QUERY,
                _query("view", {"type": "string", "enum": ["tasks", "relative", "significance"]}),
                _query(
                    "sig_step",
                    {"type": "string"},
                    "Significance view: the step compared (each run's last value at or before "
                    "it); default: each run's final value",
                ),
                _query("suite", {"type": "string"}, "Evaluation suite; default: the first"),
                _query("score", {"type": "string", "enum": ["accuracy", "acc_norm"]}),
                _query("baseline", {"type": "string"}, "Group label; default: standalone"),
            ],
        ),
        "/api/v1/worker": {
            "get": {
                "summary": "Whether a Celery worker is running (the pages' offline notice)",
                "description": "Read from the workers' heartbeats; no worker means queued runs "
                "wait. Any logged-in user may read it.",
                "security": READ_SECURITY,
                "responses": {
                    "200": _reply("WorkerStatus"),
                    "401": READ_ERRORS["401"],
                    "405": READ_ERRORS["405"],
                },
            }
        },
        "/api/v1/schema": {
            "get": {
                "summary": "This description",
                "security": [],
                "responses": {
                    "200": {
                        "description": "OpenAPI 3.1",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    "405": _error("Another method than GET"),
                },
            }
        },
    }


@lru_cache(maxsize=8)
def _document(kinds: tuple[str, ...]) -> dict[str, Any]:
    """The whole document for these event kinds."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Mutual RL Lab API",
            "version": "1",
            "description": "Ingestion (per-run bearer token, SPEC 8.1) and the reads (a "
            "session login or a personal read token; lab members only, as on the pages). "
            'Every error is JSON {"error": message}.',
        },
        "paths": _paths(kinds),
        "components": {
            "schemas": {**wire.json_schemas(), **_reply_schemas(kinds)},
            "securitySchemes": {
                "runToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The run's ingestion token (mrl_...): one per run, shown once, "
                    "stored hashed; revoked when a new one is issued. Writes that run only; "
                    "reads nothing.",
                },
                "personalToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A person's read token (mrlp_...), made on the API tokens "
                    "page (/settings/tokens/): shown once, stored hashed, revocable. Reads what "
                    "its owner may read, with GET only; writes nothing.",
                },
                "session": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": "sessionid",
                    "description": "A logged-in session (the web app's login page)",
                },
            },
        },
    }


def openapi() -> dict[str, Any]:
    """The OpenAPI 3.1 document for the event kinds registered now (cached and shared:
    treat it as read-only)."""
    return _document(wire.event_kind_names())


def __getattr__(name: str) -> Any:
    """``OPENAPI``: :func:`openapi`, read at each access (the kinds may have changed)."""
    if name == "OPENAPI":
        return openapi()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@cache_control(public=True, max_age=300)
@allow_methods("GET")
def schema(request: HttpRequest) -> HttpResponse:
    """The OpenAPI 3.1 description of this API, as JSON."""
    return json_reply(openapi())
