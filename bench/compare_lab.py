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
encoding), then ``GET /api/v1/compare`` over HTTP through gunicorn (2 sync workers,
after four unmeasured requests for 50 runs in no measured set, which load each worker's
code and connection). The first pass of each is reported apart ("cold": the sets' pages
are not yet in PostgreSQL's shared buffers, though they may be in the OS's page cache),
the second as "warm"; the load average is printed before and after. scale.py measures the same
request once per page, right after its 80-s rollup sweep has written 735 MiB
(PostgreSQL is still writing it back then); this measures it apart, so that two
checkouts can be compared back to back on the same data.

``--drop-caches`` makes the first pass cold from the disk up (root, Linux, a local
cluster that ``pg_ctlcluster`` manages: ``--cluster 15/main``): before each of its
requests it stops PostgreSQL, drops the OS's page cache and starts PostgreSQL again,
then builds one comparison of a warm-up set (runs in no measured set) so that the
server's catalogues and the indexes' upper pages are back in memory, as in a server that
has been up a while. What the measured request then reads from its runs' rows, blocks
and points comes from the disk. Each cold start drops what the requests before it read,
so the sets are read once more, unmeasured, before the warm pass.
"""

from __future__ import annotations

import argparse
import random
import subprocess
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


class ColdStart:
    """Empties every cache between the database's disk and a request (``--drop-caches``):
    PostgreSQL stopped, the OS's page cache dropped, PostgreSQL started, then one
    comparison of ``warm_up`` built (``build``) to bring the server's catalogues and the
    indexes' upper pages back, as in a server that has been up a while."""

    def __init__(self, cluster: str, warm_up: list[int]) -> None:
        self.version, self.name = cluster.split("/")
        self.warm_up = warm_up

    def __call__(self, build: Callable[[list[int]], Any]) -> None:
        from django.db import connection

        connection.close()
        subprocess.run(["pg_ctlcluster", self.version, self.name, "stop"], check=True)
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        subprocess.run(["pg_ctlcluster", self.version, self.name, "start"], check=True)
        build(self.warm_up)


def in_process(
    sets: list[list[int]], user: Any, cold_start: ColdStart | None = None
) -> tuple[Passes, dict[str, dict[str, float]]]:
    """Per pass, per set, the build plus its JSON encoding (s); per pass, the parts' mean
    ms per build. With ``cold_start``, it runs before each build of the first pass."""
    from django.http import QueryDict

    from webapp.compare import selectors
    from webapp.compare.serialize import comparison_json
    from webapp.compare.spec import ComparisonSpec
    from webapp.core.http import json_reply

    def build(run_ids: list[int]) -> None:
        query_dict = QueryDict(mutable=True)
        for key, value in query(run_ids).items():
            query_dict.setlist(key, value if isinstance(value, list) else [value])
        spec = ComparisonSpec.from_query(query_dict)
        comparison = selectors.comparison_build(spec=spec, runs=selectors.runs_for_spec(user, spec))
        encoding = time.perf_counter()
        json_reply(comparison_json(comparison))
        spent["JSON encoding"] += time.perf_counter() - encoding

    spent = timed_parts()
    totals: Passes = {"cold": [], "warm": []}
    parts: dict[str, dict[str, float]] = {}
    for index, run_ids in enumerate([*sets, *sets]):
        name = "cold" if index < len(sets) else "warm"
        if index == len(sets):
            parts["cold"] = _parts_mean(spent, len(sets))
            spent.update(dict.fromkeys(spent, 0.0))
        if cold_start is not None and index <= len(sets):
            measured = dict(spent)  # the builds below are not measured
            if name == "cold":
                cold_start(build)
            else:  # each cold start dropped the sets read before it
                for warm_up in sets:
                    build(warm_up)
            spent.update(measured)
        started = time.perf_counter()
        build(run_ids)
        totals[name].append(time.perf_counter() - started)
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


def over_http(
    env: dict[str, str],
    session_id: str,
    sets: list[list[int]],
    warm_up_set: list[int],
    cold_start: ColdStart | None = None,
) -> Passes:
    """Per pass, per set, ``GET /api/v1/compare`` through gunicorn (s), after four
    unmeasured requests for ``warm_up_set`` (runs in no measured set), so that each
    worker has loaded its code and opened its connection; with ``cold_start`` before each
    request of the first pass (its warm-up asks four times too, so that both workers have
    reconnected)."""
    port = free_port()
    server = start_server(env, port)
    try:
        session = requests.Session()
        session.cookies.set("sessionid", session_id)
        compare_url = f"http://127.0.0.1:{port}/api/v1/compare"
        times: Passes = {"cold": [], "warm": []}

        def ask(run_ids: list[int]) -> None:
            session.get(compare_url, params=query(run_ids)).raise_for_status()

        def warm_up(run_ids: list[int]) -> None:
            for _ in range(4):
                ask(run_ids)

        warm_up(warm_up_set)
        for index, run_set in enumerate([*sets, *sets]):
            if cold_start is not None and index < len(sets):
                cold_start(warm_up)
            elif cold_start is not None and index == len(sets):
                for run_ids in sets:  # each cold start dropped the sets read before it
                    ask(run_ids)
            started = time.perf_counter()
            ask(run_set)
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
    parser.add_argument(
        "--drop-caches",
        action="store_true",
        help="the first pass cold from the disk: PostgreSQL restarted and the OS page cache "
        "dropped before each request (root, Linux)",
    )
    parser.add_argument(
        "--cluster", default="15/main", help="the local cluster pg_ctlcluster restarts"
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
    unmeasured = sorted(set(run_ids).difference(*sets))
    warm_up_set = random.Random(0).sample(unmeasured, min(50, len(unmeasured)))
    cold_start = ColdStart(args.cluster, warm_up_set) if args.drop_caches else None
    user = User.objects.get(username="user00")

    client = Client()
    client.force_login(user)
    session_id = client.cookies["sessionid"].value
    if not args.http_first:
        totals, parts = in_process(sets, user, cold_start)
    times = over_http(env, session_id, sets, warm_up_set, cold_start)
    if args.http_first:
        totals, parts = in_process(sets, user, cold_start)

    def ms(values: list[float]) -> str:
        return f"{percentile(values, 0.5) * 1000:,.0f} / {percentile(values, 0.95) * 1000:,.0f}"

    first = "over HTTP" if args.http_first else "in-process"
    if args.drop_caches:
        first += "; the first pass from the disk (--drop-caches)"
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
