"""bench/scaling.py's pure helpers (the curve reading, the all-gather byte count, the
in-process all-gather) and one tiny in-process pool step through the trainer's code."""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench" / "scaling.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_scaling", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


bench = _bench()
SIZES = [1.0, 2.0, 3.0, 4.0, 8.0]


def test_a_flat_curve_reads_constant() -> None:
    growth = bench.fit_growth(SIZES, [0.30, 0.31, 0.29, 0.30, 0.31])
    assert growth.shape == "constant"
    assert growth.predict(32) == pytest.approx(0.302, abs=0.01)
    assert growth.exponent == pytest.approx(0.0, abs=0.05)


def test_a_line_with_an_intercept_reads_linear() -> None:
    growth = bench.fit_growth(SIZES, [0.5 + 0.2 * n for n in SIZES])
    assert growth.shape == "linear"
    assert growth.coefficients == pytest.approx((0.5, 0.2))
    assert growth.predict(32) == pytest.approx(6.9)
    assert 0 < growth.exponent < 1  # the intercept bends the log-log slope below 1


def test_pairwise_traffic_reads_quadratic() -> None:
    traffic = [n * (n - 1) * 1000 for n in SIZES]  # zero for a pool of one
    growth = bench.fit_growth(SIZES, traffic)
    assert growth.shape == "quadratic"
    assert growth.predict(32) == pytest.approx(32 * 31 * 1000, rel=1e-6)
    assert growth.exponent == pytest.approx(2.4, abs=0.1)  # log-log over the positive points


def test_a_curve_no_polynomial_fits_falls_back_to_a_power_law() -> None:
    xs = [1.0, 10.0, 50.0]
    growth = bench.fit_growth(xs, [x**1.5 for x in xs])
    assert growth.shape == "power law"
    assert growth.exponent == pytest.approx(1.5)
    assert growth.predict(5000) == pytest.approx(5000**1.5, rel=1e-6)


def test_a_concave_curve_reads_as_a_power_law_not_a_parabola() -> None:
    growth = bench.fit_growth(SIZES, [n**0.5 for n in SIZES])
    assert growth.shape == "power law"
    assert growth.exponent == pytest.approx(0.5)


def test_noise_around_a_flat_curve_does_not_buy_a_parabola() -> None:
    # per-policy step seconds measured on a loaded machine: flat, with one low point
    growth = bench.fit_growth(SIZES, [0.151, 0.156, 0.157, 0.120, 0.139])
    assert growth.shape == "constant"
    assert growth.predict(32) == pytest.approx(0.1446, abs=1e-3)


def test_reading_names_shape_slope_and_prediction() -> None:
    line = bench.reading("SEE bytes", SIZES, [n * (n - 1) * 1000 for n in SIZES], "B", 32)
    assert line.startswith("SEE bytes: quadratic, ")
    assert "at x = 32: 992.0 kB." in line
    assert bench.reading("THL s", SIZES, [0.0] * 5, "s", 32).endswith("in this regime).")


def test_gather_wire_bytes_sends_the_others_records_to_one_rank() -> None:
    assert bench.gather_wire_bytes([500]) == 0
    assert bench.gather_wire_bytes([100, 300]) == 1 * 300 + 2 * 1 * 8
    assert bench.gather_wire_bytes([10, 20, 30, 40]) == 3 * 40 + 4 * 3 * 8


def test_allgather_wire_bytes_pads_to_the_largest_record() -> None:
    assert bench.allgather_wire_bytes([500]) == 0
    assert bench.allgather_wire_bytes([100, 300]) == 2 * 1 * (300 + 8)
    assert bench.allgather_wire_bytes([10, 20, 30, 40]) == 4 * 3 * (40 + 8)


def test_the_local_hub_gathers_every_rank_in_rank_order() -> None:
    hub = bench.LocalHub(3)
    gathered: dict[int, list[Any]] = {}

    def worker(rank: int) -> None:
        hub.local.rank, hub.local.calls = rank, 0
        hub.baton.acquire()
        try:
            for call in range(2):
                out: list[Any] = [None] * 3
                hub.all_gather_object(out, {"rank": rank, "call": call, "pad": "x" * rank})
                gathered[rank * 10 + call] = out
        finally:
            hub.baton.release()

    threads = [threading.Thread(target=worker, args=(rank,)) for rank in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    for rank in range(3):
        for call in range(2):
            assert [o["rank"] for o in gathered[rank * 10 + call]] == [0, 1, 2]
            assert {o["call"] for o in gathered[rank * 10 + call]} == {call}
    sizes = hub.sizes[0]
    assert sizes[2] - sizes[0] == 2  # the pickled records, two more characters


def test_a_tiny_prp_pool_steps_through_the_trainer(zoo_dir: Path) -> None:
    cell = bench.run_pool(
        "prp", 2, 8, prompts=2, group=2, steps=1, warmup=0, threads=1, forced=True,
        zoo_dir=zoo_dir,
    )  # fmt: skip
    assert cell.response_length == 8  # forced to max_new_tokens
    assert cell.per_policy("step") > cell.per_policy("thl") > 0
    assert cell.see_bytes() == bench.allgather_wire_bytes(cell.see_sizes[0]) > 0
    assert cell.metrics_bytes() == bench.gather_wire_bytes(cell.metrics_sizes[0]) > 0
    assert len(cell.records) == 1 and [r.policy for r in cell.records[0]] == ["llama-0", "qwen-1"]


def test_reading_cells_for_a_table_row() -> None:
    shape, slope, formula, at = bench.reading_cells(SIZES, [0.5 + 0.2 * n for n in SIZES], "s", 32)
    assert (shape, at) == ("linear", "6.90 s")
    assert formula.startswith("0.5 + 0.2·x (held out ±")
    assert float(slope) == pytest.approx(0.53, abs=0.01)


def test_step_points_counts_the_pool_aggregates_as_the_spool_writes_them() -> None:
    from trainer.exchange import StepRecord

    records = [
        StepRecord("a", 3, ("p",), {"train/reward_mean": 0.5, "perf/step_s": 1.0, "x": 2.0}),
        StepRecord("b", 3, ("p",), {"train/reward_mean": 0.7}),
    ]
    assert bench.step_points(records) == 4 + 2  # no val/reward@1 at this step
    renumbered = bench.renumbered(records, 9)
    assert [r.step for r in renumbered] == [9, 9] and records[0].step == 3


def test_server_cpu_reads_proc_stat_fields() -> None:
    import os

    fields = bench.ServerCpu._stat(os.getpid())
    assert fields is not None and int(fields[1]) == os.getppid()
