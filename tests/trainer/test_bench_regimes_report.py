"""bench/regimes.py's complementary report prints PRP's IS weight mean per skill of the
prompt beside the overall one (synthetic run results, no training)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "regimes.py"


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
    bench.report_complementary(results)
    lines = capsys.readouterr().out.splitlines()
    assert "| regime | policy | all | addition | multiplication |" in lines
    assert "| prp | a | 0.600 | 0.900 | 0.030 |" in lines
