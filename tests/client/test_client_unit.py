"""The notebook client (client/, issue 34) without a server: retries, errors, the
records and DataFrames it makes, what it imports, and that it installs on its own."""

from __future__ import annotations

import io
import json
import math
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from mutual_rl_lab_client import (
    BadRequest,
    Forbidden,
    Lab,
    LabUnreachable,
    NotFound,
    Unauthorized,
    frames,
)
from mutual_rl_lab_client.errors import ServerError
from mutual_rl_lab_client.transport import Transport

REPO = Path(__file__).resolve().parents[2]


class FakeResponse(io.BytesIO):
    def __enter__(self) -> FakeResponse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def http_error(
    url: str, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> urllib.error.HTTPError:
    message = Message()
    for name, value in (headers or {}).items():
        message[name] = value
    return urllib.error.HTTPError(
        url, status, "error", message, io.BytesIO(json.dumps(body).encode())
    )


def scripted(*answers: Any) -> tuple[Callable[..., FakeResponse], list[urllib.request.Request]]:
    """An opener answering each request with the next of ``answers``: an exception to
    raise, or a JSON body."""
    seen: list[urllib.request.Request] = []
    queue = list(answers)

    def opener(request: urllib.request.Request, timeout: float) -> FakeResponse:
        seen.append(request)
        answer = queue.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return FakeResponse(json.dumps(answer).encode())

    return opener, seen


def test_retries_transient_failures_with_doubling_pauses() -> None:
    url = "http://lab.test/api/v1/runs"
    opener, seen = scripted(
        urllib.error.URLError(ConnectionRefusedError("refused")),
        http_error(url, 503, {"error": "busy"}),
        http_error(url, 429, {"error": "slow down"}, {"Retry-After": "7"}),
        {"runs": []},
    )
    pauses: list[float] = []
    transport = Transport(
        "http://lab.test/", "mrlp_x", retries=3, backoff=0.5, sleep=pauses.append, opener=opener
    )
    assert transport.get("/api/v1/runs", [("regime", "sgt"), ("regime", "prp")]) == {"runs": []}
    assert pauses == [0.5, 1.0, 7.0]  # doubling; a Retry-After above it is honoured
    assert seen[0].full_url == "http://lab.test/api/v1/runs?regime=sgt&regime=prp"
    assert seen[0].get_header("Authorization") == "Bearer mrlp_x"


def test_gives_up_after_the_retries_and_names_the_failure() -> None:
    opener, seen = scripted(*[urllib.error.URLError(ConnectionRefusedError("refused"))] * 3)
    transport = Transport(
        "http://lab.test", None, retries=2, backoff=0, sleep=lambda s: None, opener=opener
    )
    with pytest.raises(LabUnreachable, match=r"no answer.*refused.*GET http://lab\.test/x"):
        transport.get("/x")
    assert len(seen) == 3 and seen[0].get_header("Authorization") is None


@pytest.mark.parametrize(
    ("status", "kind", "named"),
    [
        (400, BadRequest, "400 Bad Request"),
        (401, Unauthorized, "401 Unauthorized"),
        (403, Forbidden, "403 Forbidden"),
        (404, NotFound, "404 Not Found"),
        (500, ServerError, "500 Server Error"),
    ],
)
def test_errors_are_named_by_status_and_carry_the_servers_message(
    status: int, kind: type[Exception], named: str
) -> None:
    url = "http://lab.test/api/v1/runs/7/history"
    opener, seen = scripted(http_error(url, status, {"error": "what is wrong"}))
    transport = Transport("http://lab.test", "t", retries=3, sleep=lambda s: None, opener=opener)
    with pytest.raises(kind) as raised:
        transport.get("/api/v1/runs/7/history")
    assert len(seen) == 1  # never retried
    text = str(raised.value)
    assert text.startswith(f"{named}: what is wrong") and url in text
    if status == 401:
        assert "/settings/tokens/" in text


def test_runs_sends_filters_and_config_as_json_and_follows_pages() -> None:
    def page(ids: list[int], next_url: str | None) -> dict[str, Any]:
        config = {"sgt": {"lambda_sgt": 0.1}, "pool": [{"name": "a"}]}
        return {"runs": [{"id": i, "config": config, "metrics": {}} for i in ids], "next": next_url}

    opener, seen = scripted(page([9, 8], "http://lab.test/api/v1/runs?cursor=c1"), page([7], None))
    lab = Lab("http://lab.test/api/v1/", token="mrlp_t")
    lab.transport._open = opener
    records = lab.run_records(
        regime=["sgt", "prp"],
        config={"sgt.lambda_sgt": 0.1, "regime": "sgt", "grpo.kl_coef__gte": 1e-3},
        metrics=["val/reward@1"],
        state="completed",
    )
    assert [r["id"] for r in records] == [9, 8, 7]
    assert records[0]["config.sgt.lambda_sgt"] == 0.1 and records[0]["config.pool"] == [
        {"name": "a"}
    ]
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(seen[0].full_url).query)
    assert query["regime"] == ["sgt", "prp"] and query["state"] == ["completed"]
    assert query["config.sgt.lambda_sgt"] == ["0.1"] and query["config.regime"] == ['"sgt"']
    assert query["config.grpo.kl_coef__gte"] == ["0.001"] and query["metric"] == ["val/reward@1"]
    assert seen[1].full_url == "http://lab.test/api/v1/runs?cursor=c1"
    with pytest.raises(TypeError, match="unknown run filter"):
        lab.run_records(regim="sgt")


def test_records_decode_non_finite_values_and_flatten() -> None:
    run = {
        "id": 3,
        "experiment": {"id": 1, "name": "e"},
        "links": {"page": "http://lab.test/runs/3/"},
        "config": {"a": {"b": 1, "c": {"d": "x"}}, "pool": [1]},
        "metrics": {
            "val/reward@1": {
                "_pool": {
                    "final": "NaN",
                    "final_step": 9,
                    "best": 0.5,
                    "best_step": 4,
                    "n_points": 10,
                }
            }
        },
    }
    record = frames.run_record(run)
    assert (
        record["config.a.b"] == 1 and record["config.a.c.d"] == "x" and record["config.pool"] == [1]
    )
    assert (
        math.isnan(record["final/_pool/val/reward@1"]) and record["best/_pool/val/reward@1"] == 0.5
    )
    assert record["experiment"] == "e" and record["url"].endswith("/runs/3/")
    history = {
        "run": 3,
        "series": [
            {
                "policy": "a",
                "key": "k",
                "step": [0, 1],
                "x": [0.0, None],
                "value": [1.5, "-Infinity"],
            }
        ],
    }
    rows = frames.history_records(history)
    assert rows[0] == {"run": 3, "policy": "a", "key": "k", "step": 0, "x": 0.0, "value": 1.5}
    assert math.isnan(rows[1]["x"]) and rows[1]["value"] == -math.inf
    comparison = {
        "groups": [{"label": "sgt", "name": "sgt"}],
        "panels": [
            {
                "policy": "a",
                "metric": "k",
                "traces": [
                    {
                        "group": "sgt",
                        "x": [1.0],
                        "mean": [0.5],
                        "lower": ["NaN"],
                        "upper": [0.7],
                        "n": [3],
                        "raw_mean": [0.4],
                    }
                ],
            }
        ],
    }
    (point,) = frames.comparison_records(comparison)
    assert point["group_name"] == "sgt" and math.isnan(point["lower"]) and point["n"] == 3


def test_dataframes_put_the_main_columns_first() -> None:
    pandas = pytest.importorskip("pandas")
    table = frames.runs_frame(
        [
            frames.run_record(
                {
                    "id": 1,
                    "name": "r",
                    "created_at": "2026-12-01T10:00:00+00:00",
                    "config": {"x": 1},
                }
            )
        ]
    )
    assert list(table.columns[:3]) == ["id", "name", "experiment"]
    assert table["created_at"][0] == pandas.Timestamp("2026-12-01T10:00:00Z")
    assert list(frames.frame([], ("run", "step")).columns) == ["run", "step"]


def test_imports_neither_django_nor_torch_nor_pandas() -> None:
    probe = (
        "import sys, mutual_rl_lab_client\n"
        "from mutual_rl_lab_client import lab, frames, transport\n"
        "names = ('django', 'torch', 'pandas', 'numpy', 'trainer', 'webapp', 'requests')\n"
        "print(sorted(name for name in names if name in sys.modules))"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd="/"
    )
    assert found.stdout.strip() == "[]"


def test_installs_on_its_own(tmp_path: Path) -> None:
    """``pip install ./client`` as a wheel into an empty folder, then imported by a Python
    that sees nothing but the standard library and that folder."""
    wheels, target, source = tmp_path / "wheels", tmp_path / "site", tmp_path / "client"
    # built from a copy: setuptools leaves a build/ folder beside the sources
    shutil.copytree(REPO / "client", source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("mutual_rl_lab_client-*.whl")
    subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    probe = (
        f"import sys; sys.path.insert(0, {str(target)!r}); import mutual_rl_lab_client as c; "
        "print(c.__file__, c.Lab('http://x').url)"
    )
    found = subprocess.run(
        [sys.executable, "-S", "-c", probe], capture_output=True, text=True, check=True, cwd="/"
    )
    assert found.stdout.split() == [
        str(target / "mutual_rl_lab_client" / "__init__.py"),
        "http://x",
    ]
