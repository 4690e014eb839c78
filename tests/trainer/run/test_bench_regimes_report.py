"""bench/regimes.py's sliced reports (complementary and gap pools) on synthetic run
results, no training: PRP's IS weight per skill, the primary endpoint's paired
t-interval, Holm over the rest, step-0 values, the discrimination rows and the pool's net
effect, ``--primary``.

Student t with 2 degrees of freedom has a closed-form tail, P(|T_2| > t) = 1 - t /
sqrt(2 + t^2); the p-values below use it."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench" / "regimes.py"
VAL = "val/reward@1"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_regimes", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_report_has_a_column_per_skill_of_the_is_weight(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = _bench()
    val = {"val/reward@1": {2: 0.5}, "val/reward@1/addition": {2: 0.9}}
    weights = {
        "prp/is_weight_mean": {1: 0.5, 2: 0.7},
        "prp/is_weight_mean/addition": {1: 0.9, 2: 0.9},
        "prp/is_weight_mean/multiplication": {1: 0.02, 2: 0.04},
    }
    results = {
        "standalone": [bench.RunResult({"a": dict(val)}, 1.0)],
        "prp": [bench.RunResult({"a": val | weights}, 2.0)],
    }
    bench.report_sliced(results, "complementary", None)
    lines = capsys.readouterr().out.splitlines()
    assert "| regime | policy | all | addition | multiplication |" in lines
    assert "| prp | a | 0.600 | 0.900 | 0.030 |" in lines


def test_the_gap_report_states_the_primary_endpoint_and_holm_over_the_rest(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bench = _bench()

    def run(carry_final: float, no_carry_final: float) -> object:
        curves = {
            "val/reward@1": {0: 0.5, 60: 0.5},
            "val/reward@1/carry": {0: 0.0, 60: carry_final},
            "val/reward@1/no_carry": {0: 1.0, 60: no_carry_final},
        }
        return bench.RunResult({"qwen-nocarry": curves}, 1.0)

    results = {
        "standalone": [run(0.0, 1.0), run(0.0, 0.98), run(0.05, 1.0)],
        "sgt": [run(0.2, 0.9), run(0.15, 0.88), run(0.25, 0.92)],
        "xgrpo": [run(0.0, 1.0), run(0.05, 0.98), run(0.05, 1.0)],
    }
    out = tmp_path / "numbers.json"
    bench.report_sliced(results, "gap", out)
    text = capsys.readouterr().out
    # Differences 0.20, 0.15, 0.20: mean 0.18333, sd 0.028868, se 0.016667,
    # t_{0.975, 2} = 4.302653, half-width 0.071711: [0.1116, 0.2550].
    assert "sgt minus standalone, paired by" in text
    assert "+0.183 [+0.112, +0.255] (95% paired t-interval)" in text
    # The family: 8 comparisons (2 variants x carry, no_carry, all, discrimination/carry)
    # but the primary, and but the 3 without a spread (every seed moved by the same
    # amount: no test, no p): 4.
    assert "Holm over\nthe 4 comparisons other than the primary endpoint), 3 seeds" in text
    row = next(line for line in text.splitlines() if line.startswith("| qwen-nocarry | carry |"))
    # step 0, then standalone's finals 0, 0, 0.05; then sgt's cell, the primary (no Holm p)
    assert row.startswith("| qwen-nocarry | carry | 0.000 ± 0.000 | 0.017 ± 0.029 | ")
    assert "0.200 ± 0.050 (+0.183 [+0.112, +0.255]) **primary**" in row
    # p of the family, t on 2 df: xgrpo's carry differences 0, 0.05, 0 (t = 1, p =
    # 1 - 1/sqrt(3) = 0.4226), its discrimination the same; sgt's no_carry -0.1, -0.1,
    # -0.08 (t = 14, p = 0.0051); sgt's discrimination 0.1, 0.05, 0.12 (t = 4.3235, p =
    # 0.0496). Holm: 4 x 0.0051 = 0.020, 3 x 0.0496 = 0.15, 2 x 0.4226 = 0.85, 0.85.
    assert "(+0.017 [-0.055, +0.088], p 0.85)" in row
    no_carry = next(line for line in text.splitlines() if "| qwen-nocarry | no_carry |" in line)
    assert "(-0.093 [-0.122, -0.065], p 0.020)" in no_carry
    # xgrpo's no_carry: every seed the same as standalone's, no test.
    assert "(+0.000 on every seed: no spread, no test) |" in no_carry
    # Discrimination, per seed carry + no_carry - 1: standalone 0, -0.02, 0.05; sgt 0.1,
    # 0.03, 0.17 (differences 0.1, 0.05, 0.12: 0.09 [0.000, 0.180], Holm 0.15).
    discrimination = next(
        line for line in text.splitlines() if "| qwen-nocarry | discrimination/carry |" in line
    )
    assert "| 0.000 ± 0.000 | 0.010 ± 0.036 | 0.100 ± 0.070 (+0.090 [+0.000, +0.180], p 0.15)" in (
        discrimination
    )
    # Figure 11 with the app's estimator and interval: every run's overall value is 0.5,
    # so +0.0% and a point interval (paired delta method, no variance anywhere).
    assert "| qwen-nocarry | 0.500 ± 0.000 | +0.0 [+0.0, +0.0] |" in text
    assert "[95% interval, paired delta method over the seeds," in text
    numbers = json.loads(out.read_text())
    assert len(numbers["comparisons"]) == 8
    flat = next(c for c in numbers["comparisons"] if (c["variant"], c["key"]) == ("sgt", VAL))
    assert flat["p"] is None and flat["holm_p"] is None and flat["estimate"] == 0.0
    assert [c["variant"] for c in numbers["comparisons"] if c["primary"]] == ["sgt"]
    assert numbers["runs"]["sgt"][0]["curves"]["qwen-nocarry"]["val/reward@1/carry"]["60"] == 0.2


def gap_run(bench: ModuleType, finals: dict[str, tuple[float, float, float]]) -> object:
    """A gap-pool run: per policy its final (carry, no_carry, overall) val/reward@1."""
    curves = {
        policy: {
            f"{VAL}/carry": {0: 0.0, 60: carry},
            f"{VAL}/no_carry": {0: 1.0, 60: no_carry},
            VAL: {0: 0.5, 60: overall},
        }
        for policy, (carry, no_carry, overall) in finals.items()
    }
    return bench.RunResult(curves, 1.0)


def test_the_pool_mean_is_the_per_seed_mean_over_policies_then_paired(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = _bench()
    # Overall finals (a, b) per seed; the pool mean per seed is (a + b) / 2.
    standalone = [(0.4, 0.6), (0.5, 0.5), (0.3, 0.7)]  # pool means 0.5, 0.5, 0.5
    sgt = [(0.5, 0.7), (0.7, 0.5), (0.4, 0.8)]  # pool means 0.6, 0.6, 0.6: +0.1 each
    xgrpo = [(0.6, 0.6), (0.6, 0.5), (0.5, 0.7)]  # 0.6, 0.55, 0.6: +0.1, +0.05, +0.1

    def runs(overall: list[tuple[float, float]]) -> list[object]:
        return [gap_run(bench, {"a": (0.0, 1.0, x), "b": (0.0, 1.0, y)}) for x, y in overall]

    results = {"standalone": runs(standalone), "sgt": runs(sgt), "xgrpo": runs(xgrpo)}
    found = bench.sliced_comparisons(results, "gap")
    assert found.rows[-1] == ("_pool", VAL)
    assert ("a", "val/discrimination/carry") in found.rows
    assert ("a", "val/discrimination/overflow") not in found.rows  # no overflow slice
    pool_sgt = found.comparisons[("sgt", "_pool", VAL)]
    assert pool_sgt.estimate == pytest.approx(0.1) and pool_sgt.no_spread
    pool_xgrpo = found.comparisons[("xgrpo", "_pool", VAL)]
    # differences 0.1, 0.05, 0.1: mean 0.08333, sd 0.028868, se 0.016667, t = 5 on 2 df
    assert pool_xgrpo.estimate == pytest.approx(0.25 / 3)
    assert pool_xgrpo.p == pytest.approx(1 - 5 / math.sqrt(27), rel=1e-9)
    assert found.primary is None  # qwen-nocarry is not in this pool
    bench.report_sliced(results, "gap", None)
    text = capsys.readouterr().out
    assert "Primary endpoint qwen-nocarry's val/reward@1/carry (sgt): not in this table;" in text
    assert "| pool mean | all | 0.500 ± 0.000 | 0.500 ± 0.000 | 0.600 ± 0.000 " in text


def test_primary_names_another_endpoint_and_leaves_it_out_of_the_family() -> None:
    bench = _bench()
    assert bench.primary_endpoint("qwen-nocarry:val/discrimination/carry") == (
        "sgt",
        "qwen-nocarry",
        "val/discrimination/carry",
    )
    assert bench.primary_endpoint("_pool:val/reward@1") == ("sgt", "_pool", VAL)
    for bad in ("qwen-nocarry", ":val/reward@1", "qwen:"):
        with pytest.raises(argparse.ArgumentTypeError, match="POLICY:METRIC"):
            bench.primary_endpoint(bad)
    results = {
        "standalone": [
            gap_run(bench, {"qwen-nocarry": (c, n, 0.5)})
            for c, n in ((0.0, 1.0), (0.0, 0.98), (0.05, 1.0))
        ],
        "sgt": [
            gap_run(bench, {"qwen-nocarry": (c, n, 0.5)})
            for c, n in ((0.2, 0.9), (0.15, 0.88), (0.25, 0.92))
        ],
    }
    primary = ("sgt", "qwen-nocarry", "val/discrimination/carry")
    found = bench.sliced_comparisons(results, "gap", primary)
    assert found.primary == primary and primary not in found.adjusted
    # The default primary (the carry slice) is back in the family.
    assert ("sgt", "qwen-nocarry", f"{VAL}/carry") in found.adjusted
    # carry (p 0.0080) and no_carry (p 0.0051) are tested, "all" has no spread: m = 2.
    assert found.family == 2
