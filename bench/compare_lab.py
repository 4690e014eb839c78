"""Issue 23's target 2 alone, warm: the 8-metric, 50-run comparison of runs not packed yet
on the lab of ``bench/scale.py``, where they are rolled up but their last 10 steps.

    PYTHONPATH=. DATABASE_URL=postgres://postgres@127.0.0.1:5432/mrl_bench_scale \\
        .venv/bin/python bench/compare_lab.py [--reps 20] [--seed 3]

Needs the 50M-point lab that ``bench/scale.py`` fills (run it once first). Puts it in the
state of scale.py's "rolled up but the last 10 steps" rows (no packs; rollups built if
there are none; each series' watermark lowered to the block before its last 10 steps)
and leaves it so. Then, for ``--reps`` random sets of 50 runs (``--seed``; the same sets
for any checkout), after as many untimed warm-up requests: the in-process build split
into its parts (runs, series index, step range, the streamed read and bucketing, the
assembly, the JSON encoding), then ``GET /api/v1/compare`` over HTTP through gunicorn (2
sync workers). scale.py measures the same request once per page, right after its
80-s rollup sweep has written 735 MiB (PostgreSQL is still writing it back then); this
measures it warm, so that two checkouts can be compared back to back on the same data.
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
from bench.scale import KEYS, POINTS, ROLLUP_TAIL, STEPS, packs_forget, point_count

PARTS = ("runs_for_spec", "series_index", "step_range", "load_buckets", "comparison_assemble")


def lab_unpacked(url: str, run_ids: list[int]) -> None:
    """No packs; every series rolled up but its last ``ROLLUP_TAIL`` steps."""
    from webapp.experiments.models import SeriesRollup

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

    spent = dict.fromkeys(PARTS, 0.0)

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


def in_process(sets: list[list[int]], user: Any) -> tuple[list[float], dict[str, float]]:
    """Per set, the build plus its JSON encoding (s); the parts' mean ms per build."""
    from django.http import QueryDict

    from webapp.api.http import json_reply
    from webapp.compare import selectors
    from webapp.compare.serialize import comparison_json
    from webapp.compare.spec import ComparisonSpec

    spent = timed_parts()
    totals, encoding = [], 0.0
    for run_ids in [*sets, *sets]:  # the first pass warms up
        query_dict = QueryDict(mutable=True)
        for key, value in query(run_ids).items():
            query_dict.setlist(key, value if isinstance(value, list) else [value])
        started = time.perf_counter()
        spec = ComparisonSpec.from_query(query_dict)
        comparison = selectors.comparison_build(spec=spec, runs=selectors.runs_for_spec(user, spec))
        built = time.perf_counter()
        json_reply(comparison_json(comparison))
        totals.append(time.perf_counter() - started)
        encoding += time.perf_counter() - built
    reps = len(sets)
    parts = {name: seconds / (2 * reps) * 1000 for name, seconds in spent.items()}
    parts["JSON encoding"] = encoding / (2 * reps) * 1000
    return totals[reps:], parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20, help="run sets measured (and warmed)")
    parser.add_argument("--seed", type=int, default=3, help="draws the sets of 50 runs")
    args = parser.parse_args()

    env = app_environment("compare-lab")
    url = env["DATABASE_URL"]
    if point_count(url) != POINTS:
        sys.exit(f"{url} holds no lab of {POINTS:,} points: run bench/scale.py first")
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.test import Client

    from webapp.experiments.models import Run

    run_ids = sorted(Run.objects.values_list("pk", flat=True))
    lab_unpacked(url, run_ids)
    rng = random.Random(args.seed)
    sets = [rng.sample(run_ids, 50) for _ in range(args.reps)]
    user = User.objects.get(username="user00")

    totals, parts = in_process(sets, user)
    client = Client()
    client.force_login(user)
    port = free_port()
    server = start_server(env, port)
    try:
        session = requests.Session()
        session.cookies.set("sessionid", client.cookies["sessionid"].value)
        compare_url = f"http://127.0.0.1:{port}/api/v1/compare"
        times = []
        for index, run_set in enumerate([*sets, *sets]):  # the first pass warms up
            started = time.perf_counter()
            session.get(compare_url, params=query(run_set)).raise_for_status()
            if index >= len(sets):
                times.append(time.perf_counter() - started)
    finally:
        server.terminate()
        server.wait(timeout=30)

    def ms(values: list[float]) -> str:
        return f"{percentile(values, 0.5) * 1000:,.0f} / {percentile(values, 0.95) * 1000:,.0f}"

    print(f"\n8 metrics x 5 policies x 50 runs x {STEPS:,} steps, not packed, rolled up but "
          f"the last {ROLLUP_TAIL} steps; {args.reps} run sets (seed {args.seed})\n")  # fmt: skip
    print("| measured | p50 / p95 ms |\n| --- | --- |")
    print(f"| in-process build + JSON encoding | {ms(totals)} |")
    print(f"| GET /api/v1/compare over HTTP | {ms(times)} |")
    print("\n| part of the in-process build (mean ms) | " + " | ".join(parts) + " |")
    print("| --- " * (len(parts) + 1) + "|")
    print("| | " + " | ".join(f"{value:.0f}" for value in parts.values()) + " |")


if __name__ == "__main__":
    main()
