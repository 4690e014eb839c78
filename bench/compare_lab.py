"""Issue 23's target 2 alone, warm: the 8-metric, 50-run comparison of runs not packed yet
on the lab of ``bench/scale.py``, where they are rolled up but their last 10 steps.

    PYTHONPATH=. DATABASE_URL=postgres://postgres@127.0.0.1:5432/mrl_bench_scale \\
        .venv/bin/python bench/compare_lab.py [--reps 20] [--seed 3]

Needs the 50M-point lab that ``bench/scale.py`` fills (run it once first; ``--runs 2000``
for the 200M-point lab of ``scale.py --runs 2000``). Puts it in the
state of scale.py's "rolled up but the last 10 steps" rows (no packs; rollups built if
there are none; each series' watermark lowered to the block before its last 10 steps)
and leaves it so. Then, for ``--reps`` random sets of 50 runs (``--seed``; the same sets
for any checkout), two passes over the sets: the in-process build split into its parts
(runs, series index, step range, the streamed read and bucketing, the assembly, the JSON
encoding), then ``GET /api/v1/compare`` over HTTP through gunicorn (2 sync workers). The
first pass of each is reported apart ("cold": the sets' pages are not yet in
PostgreSQL's shared buffers, though they may be in the OS's page cache), the second as
"warm"; the load average is printed before and after. scale.py measures the same
request once per page, right after its 80-s rollup sweep has written 735 MiB
(PostgreSQL is still writing it back then); this measures it apart, so that two
checkouts can be compared back to back on the same data.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ingest import (
    app_environment,
    free_port,
    percentile,
    rollup_sweep,
    start_server,
    tail_to_points,
)
from bench.scale import (
    EXPERIMENTS,
    KEYS,
    ROLLUP_TAIL,
    SEEDS,
    STEPS,
    lab_points,
    packs_forget,
    point_count,
)

PARTS = ("runs_for_spec", "series_index", "step_range", "load_buckets", "comparison_assemble")


def lab_unpacked(url: str, run_ids: list[int]) -> None:
    """No packs; every series rolled up but its last ``ROLLUP_TAIL`` steps."""
    from webapp.metrics.models import SeriesRollup

    packs_forget(url)
    if SeriesRollup.objects.exists():
        tail_to_points(run_ids, STEPS - 1, ROLLUP_TAIL)
    else:
        rollup_sweep(run_ids, STEPS - 1, ROLLUP_TAIL)


def query(run_ids: list[int]) -> dict[str, Any]:
    runs = ",".join(map(str, run_ids))
    return {
        "runs": runs,
        "group_by": "regime",
        "x": "step",
        "smooth": "0.6",
        "metric": list(KEYS[:8]),
    }


def timed_parts() -> dict[str, float]:
    """Wrap the build's parts in :mod:`webapp.compare.selectors` with timers; their
    accumulated seconds."""
    from webapp.compare import selectors

    spent = dict.fromkeys([*PARTS, "JSON encoding"], 0.0)

    def timer(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - started

        return timed

    for name in PARTS:
        setattr(selectors, name, timer(name, getattr(selectors, name)))
    return spent


Passes = dict[str, list[float]]
"""Per pass ("cold", then "warm"): the time of each request or build (s)."""


def in_process(sets: list[list[int]], user: Any) -> tuple[Passes, dict[str, dict[str, float]]]:
    """Per pass, per set, the build plus its JSON encoding (s); per pass, the parts' mean
    ms per build."""
    from django.http import QueryDict

    from webapp.compare import selectors
    from webapp.compare.serialize import comparison_json
    from webapp.compare.spec import ComparisonSpec
    from webapp.core.http import json_reply

    spent = timed_parts()
    totals: Passes = {"cold": [], "warm": []}
    parts: dict[str, dict[str, float]] = {}
    for index, run_ids in enumerate([*sets, *sets]):
        name = "cold" if index < len(sets) else "warm"
        if index == len(sets):
            parts["cold"] = _parts_mean(spent, len(sets))
            spent.update(dict.fromkeys(spent, 0.0))
        query_dict = QueryDict(mutable=True)
        for key, value in query(run_ids).items():
            query_dict.setlist(key, value if isinstance(value, list) else [value])
        started = time.perf_counter()
        spec = ComparisonSpec.from_query(query_dict)
        comparison = selectors.comparison_build(spec=spec, runs=selectors.runs_for_spec(user, spec))
        built = time.perf_counter()
        json_reply(comparison_json(comparison))
        totals[name].append(time.perf_counter() - started)
        spent["JSON encoding"] += time.perf_counter() - built
    parts["warm"] = _parts_mean(spent, len(sets))
    return totals, parts


def _parts_mean(spent: dict[str, float], builds: int) -> dict[str, float]:
    return {name: seconds / builds * 1000 for name, seconds in spent.items()}


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages (Linux), for the report."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def over_http(env: dict[str, str], session_id: str, sets: list[list[int]]) -> Passes:
    """Per pass, per set, ``GET /api/v1/compare`` through gunicorn (s)."""
    port = free_port()
    server = start_server(env, port)
    try:
        session = requests.Session()
        session.cookies.set("sessionid", session_id)
        compare_url = f"http://127.0.0.1:{port}/api/v1/compare"
        times: Passes = {"cold": [], "warm": []}
        for index, run_set in enumerate([*sets, *sets]):
            started = time.perf_counter()
            session.get(compare_url, params=query(run_set)).raise_for_status()
            times["cold" if index < len(sets) else "warm"].append(time.perf_counter() - started)
    finally:
        server.terminate()
        server.wait(timeout=30)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20, help="run sets measured (and warmed)")
    parser.add_argument("--seed", type=int, default=3, help="draws the sets of 50 runs")
    parser.add_argument(
        "--http-first",
        action="store_true",
        help="the HTTP passes before the in-process ones (whose cold pass is then warm)",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=EXPERIMENTS * SEEDS,
        help="the lab's runs, as bench/scale.py --runs filled it (2000: four times the lab)",
    )
    args = parser.parse_args()

    env = app_environment("compare-lab")
    url = env["DATABASE_URL"]
    points = lab_points(args.runs)
    if point_count(url) != points:
        sys.exit(
            f"{url} holds no lab of {points:,} points: run bench/scale.py --runs {args.runs} first"
        )
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.test import Client

    from webapp.runs.models import Run

    run_ids = sorted(Run.objects.values_list("pk", flat=True))
    lab_unpacked(url, run_ids)
    load_before = load_average()
    rng = random.Random(args.seed)
    sets = [rng.sample(run_ids, 50) for _ in range(args.reps)]
    user = User.objects.get(username="user00")

    client = Client()
    client.force_login(user)
    if not args.http_first:
        totals, parts = in_process(sets, user)
    times = over_http(env, client.cookies["sessionid"].value, sets)
    if args.http_first:
        totals, parts = in_process(sets, user)

    def ms(values: list[float]) -> str:
        return f"{percentile(values, 0.5) * 1000:,.0f} / {percentile(values, 0.95) * 1000:,.0f}"

    first = "over HTTP" if args.http_first else "in-process"
    print(f"\n8 metrics x 5 policies x 50 runs x {STEPS:,} steps, not packed, rolled up but "
          f"the last {ROLLUP_TAIL} steps; {args.reps} run sets (seed {args.seed}), {first} "
          f"first; load average {load_before} before, {load_average()} after\n")  # fmt: skip
    print("| measured | cold (first pass) p50 / p95 ms | warm p50 / p95 ms |\n| --- | --- | --- |")
    print(f"| in-process build + JSON encoding | {ms(totals['cold'])} | {ms(totals['warm'])} |")
    print(f"| GET /api/v1/compare over HTTP | {ms(times['cold'])} | {ms(times['warm'])} |")
    names = list(parts["warm"])
    print("\n| part of the in-process build (mean ms) | " + " | ".join(names) + " |")
    print("| --- " * (len(names) + 1) + "|")
    for name, spent in parts.items():
        print(f"| {name} | " + " | ".join(f"{spent[part]:.0f}" for part in names) + " |")


if __name__ == "__main__":
    main()
