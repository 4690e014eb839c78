"""Bucketing many series at once (``assemble.buckets_of_many``, issue 35) equals bucketing
each alone (``assemble.buckets_of``) bit for bit, and the comparison's read, which buckets
its rows a chunk at a time, gives the reference buckets whatever the chunks' boundaries
(packed and unpacked series in one chunk included)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from django.contrib.auth.models import User

from tests.webapp.compare.test_compare_support import add_series, make_runs
from webapp.compare import assemble, selectors
from webapp.metrics import series_packs
from webapp.runs.models import Run

VAL = "val/reward@1"


def _columns(rng: np.random.Generator, n: int, top: int) -> tuple[bytes, bytes]:
    steps = rng.permutation(top)[:n].astype(">i4")
    values = rng.normal(size=n)
    if n > 3:
        values[:3] = (math.nan, math.inf, -math.inf)
    return steps.tobytes(), values.astype(">f8").tobytes()


def _same(a: assemble.Buckets, b: assemble.Buckets) -> None:
    np.testing.assert_array_equal(a.present, b.present)
    for name in ("step", "value", "wall"):
        # bit for bit, NaN included
        assert getattr(a, name).tobytes() == getattr(b, name).tobytes(), name
    assert math.isnan(a.wall_first) and math.isnan(b.wall_first)


@pytest.mark.parametrize(("lo", "hi", "size"), [(0, 999, 500), (37, 400, 17), (5, 5, 1)])
@pytest.mark.parametrize("with_table", [True, False])
def test_many_series_bucket_as_each_alone(lo: int, hi: int, size: int, with_table: bool) -> None:
    rng = np.random.default_rng(35)
    columns = [_columns(rng, int(n), 1100) for n in rng.integers(0, 900, size=40)]
    columns.append((b"", b""))  # a series with no points
    table = assemble.bucket_table(lo, hi, size) if with_table else None
    many = assemble.buckets_of_many(
        [s for s, _ in columns], [v for _, v in columns], lo, hi, size, table=table
    )
    assert len(many) == len(columns)
    for (steps, values), found in zip(columns, many, strict=True):
        alone = assemble.buckets_of(
            np.frombuffer(steps, ">i4"), np.frombuffer(values, ">f8"), None, lo, hi, size
        )
        _same(found, alone)


def test_no_series_no_buckets() -> None:
    assert assemble.buckets_of_many([], [], 0, 9, 5) == []


@pytest.mark.django_db
@pytest.mark.parametrize("chunk", [1, 4, 100])
def test_chunks_of_packed_and_unpacked_series_give_the_reference_buckets(
    alice: User, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(selectors, "BUCKET_CHUNK", chunk)
    runs = make_runs(alice, "sgt", seeds=[0, 1, 2])
    rng = np.random.default_rng(7)
    ids = []
    for i, run in enumerate(runs):
        for policy in ("llama", "qwen", "gpt2"):
            steps = sorted(int(s) for s in rng.choice(np.arange(i, 300 + 9 * i), 120, False))
            noise: dict[int, float] = dict(
                zip(steps, rng.normal(size=len(steps)).tolist(), strict=True)
            )
            ids.append(add_series(run, policy, VAL, steps, noise.__getitem__))
    # the first run finished and packed: its series come first, the others after
    Run.objects.filter(pk=runs[0].pk).update(state=Run.State.COMPLETED)
    assert series_packs.packs_sweep(max_runs=10) == (1, 3)
    lo, hi = selectors.step_range(ids) or (0, 0)
    size = min(97, hi - lo + 1)
    read = selectors.buckets_postgres(ids, lo, hi, size, wall=False)
    python = selectors.buckets_portable(ids, lo, hi, size)
    assert sorted(read) == sorted(ids)
    for pk in ids:
        np.testing.assert_array_equal(read[pk].present, python[pk].present)
        np.testing.assert_allclose(read[pk].step, python[pk].step, rtol=1e-12)
        np.testing.assert_allclose(read[pk].value, python[pk].value, rtol=1e-9, atol=1e-12)
