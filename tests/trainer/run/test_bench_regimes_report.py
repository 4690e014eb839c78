"""bench/regimes.py's sliced reports (complementary and gap pools) on synthetic run
results, no training: PRP's IS weight per skill, the primary endpoint's paired
t-interval, Holm over the rest, step-0 values."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench" / "regimes.py"


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
    assert "Holm over\nthe 5 comparisons other than the primary endpoint), 3 seeds" in text
    row = next(line for line in text.splitlines() if line.startswith("| qwen-nocarry | carry |"))
    # step 0, then standalone's finals 0, 0, 0.05; then sgt's cell, the primary (no Holm p)
    assert row.startswith("| qwen-nocarry | carry | 0.000 ± 0.000 | 0.017 ± 0.029 | ")
    assert "0.200 ± 0.050 (+0.183 [+0.112, +0.255]) **primary**" in row
    # xgrpo's carry differences 0, 0.05, 0: mean 0.0167, p = 0.42 on 2 df; Holm over 5
    assert "(+0.017 [-0.055, +0.088], p 1.00)" in row
    # Figure 11 with the app's estimator: every run's overall value is 0.5, so +0.0%.
    assert "| qwen-nocarry | 0.500 ± 0.000 | +0.0 ± 0.0 |" in text
    numbers = json.loads(out.read_text())
    assert len(numbers["comparisons"]) == 6
    assert [c["variant"] for c in numbers["comparisons"] if c["primary"]] == ["sgt"]
    assert numbers["runs"]["sgt"][0]["curves"]["qwen-nocarry"]["val/reward@1/carry"]["60"] == 0.2
