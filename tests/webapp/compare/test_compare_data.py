"""Building a comparison from the database: grid, grouping, x-axes, smoothing, summary."""

from __future__ import annotations

import math

import numpy as np
import psycopg
import pytest
from django.contrib.auth.models import User
from django.db import connection

from tests.webapp.compare.test_compare_support import add_series, make_runs, spec_of
from webapp.compare import assemble, selectors
from webapp.compare.palette import BLACK, BLUISH_GREEN
from webapp.compare.stats import aggregate, ema
from webapp.metrics import series_packs
from webapp.metrics.batch import parse_batch
from webapp.metrics.ingest import metrics_ingest
from webapp.metrics.models import MetricPoint, SeriesPack
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

VAL, TRAIN = "val/reward@1", "train/reward_mean"
ROLLOUTS = "perf/rollouts_total"


def build(runs: list[Run], **params: object) -> assemble.Comparison:
    spec = spec_of(runs=",".join(str(run.pk) for run in runs), **params)
    return selectors.comparison_build(spec=spec, runs=sorted(runs, key=lambda run: run.pk))


def panel(comparison: assemble.Comparison, policy: str, metric: str) -> assemble.Panel:
    return next(p for p in comparison.panels if (p.policy, p.metric) == (policy, metric))


def trace(comparison: assemble.Comparison, policy: str, metric: str, group: str) -> assemble.Trace:
    return next(t for t in panel(comparison, policy, metric).traces if t.group == group)


@pytest.fixture
def four_runs(alice: User) -> list[Run]:
    """sgt seeds 0, 1 and standalone seeds 0, 1; llama's train/reward_mean = step * k,
    k = 1, 3 (sgt) and 2, 4 (standalone), steps 0..9."""
    runs = make_runs(alice, "sgt") + make_runs(alice, "standalone")
    for run, k in zip(runs, (1, 3, 2, 4), strict=True):
        add_series(run, "llama", TRAIN, range(10), lambda step, k=k: float(step * k))
    return runs


def test_groups_follow_the_regime_order_with_fixed_colours(four_runs: list[Run]) -> None:
    comparison = build(four_runs, metric=TRAIN, policy="llama", buckets=10)
    assert [(g.label, g.colour, g.runs) for g in comparison.groups] == [
        ("standalone", BLACK, sorted(r.pk for r in four_runs[2:])),
        ("sgt", BLUISH_GREEN, sorted(r.pk for r in four_runs[:2])),
    ]
    assert [t.group for t in panel(comparison, "llama", TRAIN).traces] == ["standalone", "sgt"]


def test_band_statistics_match_hand_computed_values(four_runs: list[Run]) -> None:
    comparison = build(four_runs, metric=TRAIN, policy="llama", buckets=10, band="std")
    assert comparison.grid == 10  # ten steps, one per bucket
    sgt = trace(comparison, "llama", TRAIN, "sgt")
    steps = np.arange(10.0)
    np.testing.assert_allclose(sgt.x, steps)
    np.testing.assert_allclose(sgt.mean, 2 * steps)  # (1 + 3) / 2 * step
    # sample std of (step, 3 step) = sqrt(2) * step
    np.testing.assert_allclose(sgt.upper - sgt.mean, math.sqrt(2) * steps)
    assert sgt.n.tolist() == [2] * 10
    standalone = trace(comparison, "llama", TRAIN, "standalone")
    np.testing.assert_allclose(standalone.mean, 3 * steps)
    minmax = trace(
        build(four_runs, metric=TRAIN, policy="llama", band="minmax"), "llama", TRAIN, "sgt"
    )
    np.testing.assert_allclose(minmax.lower, steps)
    np.testing.assert_allclose(minmax.upper, 3 * steps)


def test_buckets_average_steps_and_values(alice: User) -> None:
    [run] = make_runs(alice, "sgt", seeds=[0])
    add_series(run, "llama", TRAIN, range(100), float)
    comparison = build([run], metric=TRAIN, policy="llama", buckets=10)
    line = trace(comparison, "llama", TRAIN, "sgt")
    expected = np.arange(10) * 10 + 4.5  # bucket b holds steps 10b .. 10b + 9
    np.testing.assert_allclose(line.x, expected)
    np.testing.assert_allclose(line.mean, expected)
    np.testing.assert_allclose(line.raw_mean, expected)


def test_smoothing_is_applied_per_run_then_averaged(four_runs: list[Run]) -> None:
    comparison = build(four_runs, metric=TRAIN, policy="llama", buckets=10, smooth=0.6)
    sgt = trace(comparison, "llama", TRAIN, "sgt")
    steps = np.arange(10.0)
    curves = np.array([ema(steps * 1, 0.6), ema(steps * 3, 0.6)])
    expected = aggregate(curves, "std")
    np.testing.assert_allclose(sgt.mean, expected.mean)
    np.testing.assert_allclose(sgt.upper, expected.upper)
    np.testing.assert_allclose(sgt.raw_mean, 2 * steps)  # the unsmoothed mean


def test_nan_values_reduce_n_and_empty_buckets_are_left_out(alice: User) -> None:
    runs = make_runs(alice, "prp")
    add_series(runs[0], "qwen", VAL, [0, 10, 20], lambda s: math.nan if s == 10 else 0.5)
    add_series(runs[1], "qwen", VAL, [0, 10, 20], lambda s: math.nan if s == 10 else 0.7)
    add_series(runs[1], "qwen", TRAIN, range(21), float)  # sets the grid to 21 steps
    comparison = build(runs, metric=[VAL, TRAIN], policy="qwen", buckets=100)
    line = trace(comparison, "qwen", VAL, "prp")
    assert line.x.tolist() == [0.0, 10.0, 20.0]  # 18 empty buckets are not points
    assert line.n.tolist() == [2, 0, 2]
    assert math.isnan(line.mean[1])  # everyone NaN at step 10: shown as NaN
    assert line.mean[0] == pytest.approx(0.6)


def test_x_rollouts_uses_the_counter_of_the_same_run_and_policy(alice: User) -> None:
    runs = make_runs(alice, "sgt")
    for run, per_step in zip(runs, (8, 4), strict=True):
        add_series(run, "llama", ROLLOUTS, range(31), lambda s, k=per_step: float(k * s))
        add_series(run, "llama", VAL, [0, 10, 20, 30], lambda s: s / 100)
    comparison = build(runs, metric=VAL, policy="llama", x="rollouts", buckets=15)
    line = trace(comparison, "llama", VAL, "sgt")
    # Counter interpolated at the val steps, then the mean over runs: 6 * step.
    np.testing.assert_allclose(line.x, [0.0, 60.0, 120.0, 180.0])
    assert panel(comparison, "llama", VAL).x_label == "rollouts"
    assert not comparison.notes


def test_pool_or_a_missing_counter_falls_back_to_step(alice: User) -> None:
    runs = make_runs(alice, "sgt")
    for run in runs:
        add_series(run, "_pool", VAL, [0, 10], lambda s: 0.5)
    add_series(runs[0], "llama", ROLLOUTS, range(11), float)
    for run in runs:
        add_series(run, "llama", VAL, [0, 10], lambda s: 0.5)
    comparison = build(runs, metric=VAL, policy=["_pool", "llama"], x="rollouts")
    assert panel(comparison, "_pool", VAL).x_label == "step"
    assert panel(comparison, "llama", VAL).x_label == "step"
    assert trace(comparison, "_pool", VAL, "sgt").x.tolist() == [0.0, 10.0]
    assert any(
        note.startswith(f"pool mean: no rollout count ({ROLLOUTS})") for note in comparison.notes
    )
    assert any(
        f"llama: no rollout count ({ROLLOUTS}) in run(s) {runs[1].pk}" in n
        for n in comparison.notes
    )


def test_wall_time_is_relative_to_each_runs_first_point(alice: User) -> None:
    runs = make_runs(alice, "xgrpo")
    add_series(runs[0], "gpt2", TRAIN, range(5), float, wall=lambda s: 1000.0 + 2 * s)
    add_series(runs[1], "gpt2", TRAIN, range(5), float, wall=lambda s: 5000.0 + 4 * s)
    comparison = build(runs, metric=TRAIN, policy="gpt2", x="wall_time", buckets=10)
    np.testing.assert_allclose(trace(comparison, "gpt2", TRAIN, "xgrpo").x, 3 * np.arange(5))
    assert comparison.x_label == "wall time (s)"


def test_grouping_by_a_config_key_or_the_experiment(alice: User) -> None:
    runs = make_runs(alice, "sgt", seeds=[0, 1, 2]) + make_runs(
        alice, "sgt", seeds=[0], grpo={"kl_coef": 0.01}
    )
    for run in runs:
        add_series(run, "llama", TRAIN, range(3), float)
    by_seed = build(runs, metric=TRAIN, group_by="seed")
    assert [g.label for g in by_seed.groups] == ["0", "1", "2"]
    assert by_seed.groups[0].runs == [runs[0].pk, runs[3].pk]
    by_kl = build(runs, metric=TRAIN, group_by="grpo.kl_coef")
    assert [(g.label, len(g.runs)) for g in by_kl.groups] == [("0.001", 3), ("0.01", 1)]
    by_experiment = build(runs, metric=TRAIN, group_by="experiment")
    assert [g.label for g in by_experiment.groups] == ["sgt-exp"]


def test_default_policies_follow_the_first_runs_pool(four_runs: list[Run]) -> None:
    comparison = build(four_runs, metric=TRAIN)
    assert [p.policy for p in comparison.panels] == ["llama", "qwen", "gpt2"]
    assert "qwen / Training reward (mean): no data in any run" in comparison.notes


def test_no_points_at_all_gives_empty_panels_and_a_note(alice: User) -> None:
    runs = make_runs(alice, "sgt")
    comparison = build(runs)
    assert comparison.grid == 0 and all(not p.traces for p in comparison.panels)
    assert comparison.notes == ["no points of these metrics and policies in these runs"]


# --------------------------------------------------------------------------- SQL vs Python


@pytest.fixture
def messy(alice: User) -> list[int]:
    """Series with different step ranges, NaN, +-Infinity, NULL wall times."""
    runs = make_runs(alice, "sgt", seeds=[0, 1, 2])
    rng = np.random.default_rng(3)
    ids = []
    for i, run in enumerate(runs):
        for policy in ("llama", "qwen"):
            steps = sorted(rng.choice(np.arange(i * 7, 400 + i * 13), size=150, replace=False))
            values = rng.normal(size=len(steps))
            specials = {int(steps[5]): math.nan, int(steps[6]): math.inf, int(steps[7]): -math.inf}
            lookup = dict(zip((int(s) for s in steps), values, strict=True)) | specials
            ids.append(
                add_series(
                    run,
                    policy,
                    VAL,
                    [int(s) for s in steps],
                    lambda s, lookup=lookup: float(lookup[s]),
                    wall=lambda s, i=i: None if s % 11 == 0 else 1e9 + 3.5 * s + i,
                )
            )
    return ids


@pytest.mark.parametrize("size", [17, 100, 413])
def test_sql_buckets_equal_the_python_reference(messy: list[int], size: int) -> None:
    bounds = selectors.step_range(messy)
    assert bounds is not None
    lo, hi = bounds
    size = min(size, hi - lo + 1)
    sql = selectors.buckets_postgres(messy, lo, hi, size)
    python = selectors.buckets_portable(messy, lo, hi, size)
    for pk in messy:
        a, b = sql[pk], python[pk]
        np.testing.assert_array_equal(a.present, b.present)
        np.testing.assert_allclose(a.step, b.step, rtol=1e-12)
        np.testing.assert_allclose(a.value, b.value, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(a.wall, b.wall, rtol=1e-12)
        assert a.wall_first == b.wall_first


@pytest.mark.parametrize("lower_is_better", [False, True])
def test_sql_run_summaries_equal_the_python_reference(
    messy: list[int], lower_is_better: bool
) -> None:
    sql = selectors.run_summaries(messy, lower_is_better=lower_is_better)
    python = selectors.run_summaries_portable(messy, lower_is_better=lower_is_better)
    for pk in messy:
        assert sql[pk].final == python[pk].final
        assert sql[pk].best == python[pk].best
        assert sql[pk].mean == pytest.approx(python[pk].mean, rel=1e-12)


# --------------------------------------------------------------------------- packs


def _assert_same_buckets(a: assemble.Buckets, b: assemble.Buckets) -> None:
    np.testing.assert_array_equal(a.present, b.present)
    np.testing.assert_allclose(a.step, b.step, rtol=1e-12)
    np.testing.assert_allclose(a.value, b.value, rtol=1e-9, atol=1e-12)


def _finish(runs: list[Run]) -> list[Run]:
    """Mark ``runs`` completed; fresh copies."""
    Run.objects.filter(pk__in=[run.pk for run in runs]).update(state=Run.State.COMPLETED)
    return list(Run.objects.filter(pk__in=[run.pk for run in runs]).order_by("pk"))


@pytest.mark.parametrize(("size", "window"), [(17, None), (413, None), (37, (50, 200))])
def test_packed_series_give_the_reference_buckets(
    messy: list[int], size: int, window: tuple[int, int] | None
) -> None:
    lo, hi = window or selectors.step_range(messy)
    size = min(size, hi - lo + 1)
    python = selectors.buckets_portable(messy, lo, hi, size)
    _finish(list(Run.objects.filter(series__id__in=messy).distinct()))
    assert series_packs.packs_sweep(max_runs=10) == (3, 6)
    assert SeriesPack.objects.filter(series_id__in=messy).count() == len(messy)
    # The packs are what is read now: the points themselves could go.
    MetricPoint.objects.filter(series_id__in=messy).delete()
    read = selectors.buckets_postgres(messy, lo, hi, size, wall=False)
    for pk in messy:
        _assert_same_buckets(read[pk], python[pk])
        assert np.isnan(read[pk].wall).all()


def test_reading_never_packs_and_packs_leave_the_comparison_unchanged(
    four_runs: list[Run],
) -> None:
    finished = _finish([four_runs[0], four_runs[2]])
    runs = sorted(four_runs, key=lambda run: run.pk)
    unpacked = build(runs, metric=TRAIN, policy="llama", buckets=10, smooth=0.5)
    assert not SeriesPack.objects.exists()  # a GET never writes
    assert series_packs.packs_sweep(max_runs=10) == (2, 2)  # only the finished runs
    packed_runs = SeriesPack.objects.values_list("series__run_id", flat=True)
    assert set(packed_runs) == {r.pk for r in finished}
    packed = build(runs, metric=TRAIN, policy="llama", buckets=10, smooth=0.5)
    for group in ("sgt", "standalone"):
        a = trace(unpacked, "llama", TRAIN, group)
        b = trace(packed, "llama", TRAIN, group)
        for name in ("x", "mean", "lower", "upper", "raw_mean"):
            np.testing.assert_allclose(getattr(b, name), getattr(a, name), rtol=1e-12)


def _ingest_body(steps: range, value: float) -> bytes:
    points = ",".join(
        f'{{"policy": "llama", "key": "{TRAIN}", "step": {step}, "value": {value}}}'
        for step in steps
    )
    return f'{{"points": [{points}]}}'.encode()


def test_new_points_drop_the_runs_packs_and_reach_the_next_comparison(alice: User) -> None:
    late, other = make_runs(alice, "sgt")
    for run in (late, other):
        metrics_ingest(run=run, batch=parse_batch(_ingest_body(range(10), 1.0)))
    runs = _finish([late, other])
    assert series_packs.packs_sweep(max_runs=10) == (2, 2)
    # A replay changes nothing and keeps the packs; a late batch with new steps drops
    # the packs of its run only, and its mark.
    metrics_ingest(run=late, batch=parse_batch(_ingest_body(range(10), 1.0)))
    assert SeriesPack.objects.count() == 2
    metrics_ingest(run=late, batch=parse_batch(_ingest_body(range(10, 20), 5.0)))
    assert list(SeriesPack.objects.values_list("series__run_id", flat=True)) == [other.pk]
    assert not Run.objects.get(pk=late.pk).series_packed
    assert Run.objects.get(pk=other.pk).series_packed
    comparison = build(runs, metric=TRAIN, policy="llama", buckets=20)
    late_curve = trace(comparison, "llama", TRAIN, "sgt")
    assert late_curve.x[-1] == 19 and late_curve.raw_mean[-1] == pytest.approx(5.0)
    assert series_packs.packs_sweep(max_runs=10) == (1, 1)
    assert selectors.buckets_postgres(
        [SeriesPack.objects.get(series__run=late).series_id], 0, 19, 20, wall=False
    ).popitem()[1].value[-1] == pytest.approx(5.0)


def _other_session() -> psycopg.Connection:
    """A second connection to the test database (another process's session)."""
    settings = connection.settings_dict
    return psycopg.connect(
        dbname=settings["NAME"],
        host=settings["HOST"],
        port=settings["PORT"] or 5432,
        user=settings["USER"],
        password=settings["PASSWORD"] or None,
    )


def test_the_sweep_skips_a_run_whose_ingestion_is_in_flight(alice: User) -> None:
    busy, free = make_runs(alice, "sgt")
    for run in (busy, free):
        add_series(run, "llama", TRAIN, range(5), float)
    _finish([busy, free])
    # Another session holds the busy run's lock as an ingestion transaction does.
    with _other_session() as other:
        other.execute(
            "SELECT pg_advisory_xact_lock_shared(%s, %s)", [series_packs.PACK_LOCK_CLASS, busy.pk]
        )
        assert series_packs.packs_sweep(max_runs=10) == (1, 1)
        other.rollback()
    assert Run.objects.get(pk=free.pk).series_packed
    assert not Run.objects.get(pk=busy.pk).series_packed
    assert series_packs.packs_sweep(max_runs=10) == (1, 1)
    assert SeriesPack.objects.filter(series__run=busy).count() == 1
    assert series_packs.packs_sweep(max_runs=10) == (0, 0)


# --------------------------------------------------------------------------- summary


def test_summary_table_by_hand(alice: User) -> None:
    sgt = make_runs(alice, "sgt", seeds=[0, 1])
    prp = make_runs(alice, "prp", seeds=[0])
    curves = {
        sgt[0].pk: [0.1, 0.5, 0.3],
        sgt[1].pk: [0.2, 0.4, math.nan],
        prp[0].pk: [0.3, 0.6, 0.35],
    }
    for run in sgt + prp:
        add_series(run, "llama", VAL, range(3), lambda s, c=curves[run.pk]: c[s])
    runs = sorted(sgt + prp, key=lambda run: run.pk)
    spec = spec_of(runs=",".join(str(r.pk) for r in runs), policy="llama")
    summary = selectors.summary_build(spec=spec, runs=runs, metric=VAL)
    assert [g.label for g in summary.groups] == ["prp", "sgt"]
    prp_cell, sgt_cell = summary.rows[0].cells
    # sgt finals: 0.3 and 0.4 (the last finite value); bests 0.5, 0.4; means 0.3, 0.3
    assert sgt_cell.final.mean == pytest.approx(0.35)
    assert sgt_cell.final.std == pytest.approx(math.sqrt(0.005))
    assert sgt_cell.best.mean == pytest.approx(0.45) and sgt_cell.best.n == 2
    assert sgt_cell.mean.mean == pytest.approx(0.3)
    assert prp_cell.final.mean == pytest.approx(0.35) and prp_cell.final.std is None
    assert summary.best == {
        "final": {"llama": "prp"},  # a tie: the first group in display order
        "best": {"llama": "prp"},
        "mean": {"llama": "prp"},
    }
    lower = selectors.summary_build(spec=spec, runs=runs, metric=VAL, lower_is_better=True)
    assert lower.rows[0].cells[1].best.mean == pytest.approx(0.15)  # mins 0.1 and 0.2
    assert lower.best["best"] == {"llama": "sgt"}
    assert lower.best["mean"] == {"llama": "sgt"}
