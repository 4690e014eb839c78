"""The same per-seed numbers through ``bench/regimes.py``'s table function and through the
compare page's significance rows give the same p for the primary endpoint and the same
Holm p for every other comparison (issue 45: bench and app kept the primary endpoint in
different families, so one endpoint had two p-values)."""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path
from types import ModuleType

import pytest

from trainer.metrics import POOL
from webapp.compare.assemble import Group
from webapp.compare.bars import FinalValue
from webapp.compare.significance import Primary, significance_rows

BENCH = Path(__file__).resolve().parents[3] / "bench" / "regimes.py"
VAL = "val/reward@1"
CARRY, NO_CARRY = f"{VAL}/carry", f"{VAL}/no_carry"
DISCRIMINATION = "val/discrimination/carry"
# Per variant, per policy, per seed (4 seeds): (carry, no_carry, overall) final values.
FINALS = {
    "standalone": {
        "a": [(0.00, 0.98, 0.50), (0.05, 1.00, 0.52), (0.00, 0.96, 0.47), (0.10, 0.99, 0.55)],
        "b": [(0.60, 0.70, 0.61), (0.55, 0.72, 0.60), (0.65, 0.69, 0.66), (0.50, 0.75, 0.58)],
    },
    "sgt": {
        "a": [(0.20, 0.90, 0.55), (0.15, 0.97, 0.53), (0.30, 0.85, 0.58), (0.20, 0.95, 0.56)],
        "b": [(0.62, 0.71, 0.60), (0.60, 0.70, 0.63), (0.61, 0.74, 0.64), (0.58, 0.73, 0.61)],
    },
}
SEEDS = range(4)


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_regimes_app", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def bench_results(bench: ModuleType) -> dict[str, list[object]]:
    """The runs as bench/regimes.py reads them (curves at steps 0 and 60)."""
    results: dict[str, list[object]] = {}
    for variant, policies in FINALS.items():
        for seed in SEEDS:
            curves = {
                policy: {
                    CARRY: {0: 0.0, 60: values[seed][0]},
                    NO_CARRY: {0: 1.0, 60: values[seed][1]},
                    VAL: {0: 0.5, 60: values[seed][2]},
                }
                for policy, values in policies.items()
            }
            results.setdefault(variant, []).append(bench.RunResult(curves, 1.0))
    return results


def app_values() -> tuple[list[Group], dict[tuple[int, str, str], FinalValue], dict[int, int]]:
    """The same runs as the app stores them: run ids 1-4 standalone, 5-8 sgt, each
    policy's logged keys (the trainer logs the discrimination, slice + no_carry - 1) and
    the pool mean (``_pool``: the mean over the policies of val/reward@1)."""
    groups, values, seed_of = [], {}, {}
    for k, (variant, policies) in enumerate(FINALS.items()):
        runs = [1 + 4 * k + seed for seed in SEEDS]
        groups.append(Group(variant, "#000000", "solid", runs))
        for seed, run in zip(SEEDS, runs, strict=True):
            seed_of[run] = seed
            for policy, rows in policies.items():
                carry, no_carry, overall = rows[seed]
                logged = {
                    CARRY: carry,
                    NO_CARRY: no_carry,
                    VAL: overall,
                    DISCRIMINATION: carry + no_carry - 1.0,
                }
                for key, value in logged.items():
                    values[(run, policy, key)] = FinalValue(value, 60)
            pool = statistics.fmean(rows[seed][2] for rows in policies.values())
            values[(run, POOL, VAL)] = FinalValue(pool, 60)
    return groups, values, seed_of


def test_bench_and_app_give_the_same_p_for_the_same_endpoints() -> None:
    bench = _bench()
    found = bench.sliced_comparisons(bench_results(bench), "gap", ("sgt", "a", DISCRIMINATION))
    groups, values, seed_of = app_values()
    notes: list[str] = []
    rows, correction = significance_rows(
        groups=groups,
        policies=["a", "b", POOL],
        metrics=[CARRY, NO_CARRY, VAL, DISCRIMINATION],
        baseline="standalone",
        values=values,
        seed_of=seed_of,
        notes=notes,
        primary=Primary("a", DISCRIMINATION, "sgt"),
    )
    # The same family on both sides: 9 comparisons (2 policies x 4 keys, the pool mean's
    # val/reward@1), all tested, all but the primary in Holm's family.
    assert notes == [] and len(rows) == 9 == len(found.comparisons)
    assert found.family == 8 and correction.startswith("Holm-Bonferroni over the 8 comparisons")
    by_endpoint = {(row.policy, row.metric): row for row in rows}
    assert set(by_endpoint) == {(policy, key) for _, policy, key in found.comparisons}
    primary = by_endpoint[("a", DISCRIMINATION)]
    assert primary.primary and primary.interval is not None
    assert primary.interval.p_adjusted is None
    bench_primary = found.comparisons[("sgt", "a", DISCRIMINATION)]
    assert primary.interval.p == pytest.approx(bench_primary.p, rel=1e-12)
    assert primary.interval.estimate == pytest.approx(bench_primary.estimate, rel=1e-12)
    assert primary.interval.low == pytest.approx(bench_primary.low, rel=1e-12)
    assert "outside the Holm family of the 8 other comparisons" in primary.sentence
    for (policy, key), row in by_endpoint.items():
        if row.primary:
            continue
        assert row.interval is not None and row.interval.p_adjusted is not None
        adjusted = found.adjusted[("sgt", policy, key)]
        assert row.interval.p_adjusted == pytest.approx(adjusted, rel=1e-12), (policy, key)
        assert row.interval.p == pytest.approx(found.comparisons[("sgt", policy, key)].p)
    # The pool's net effect is one of them, compared per seed then paired on both sides.
    pool = by_endpoint[(POOL, VAL)]
    assert pool.sentence.startswith("sgt ") and "the pool's mean validation reward@1" in (
        pool.sentence
    )
    # Holm moved something: the family's smallest p is multiplied by 8.
    smallest = min(found.comparisons[c].p for c in found.adjusted)
    assert min(found.adjusted.values()) == pytest.approx(8 * smallest)
