"""Placement enacted (issue 21): device choice from the plan, the memory-fraction call,
the fit check and the GPU metrics, all through a fake CUDA runtime (no CUDA here), plus a
real short CPU run that the placement code leaves as it was."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.trainer.run.test_run_e2e import _config, _trainer
from trainer import devices
from trainer import metrics as m
from trainer.config import RunConfig
from trainer.devices import DeviceError, MemoryNeed, WorkerDevice
from trainer.exchange import StepRecord
from trainer.policy import Policy
from trainer.regimes.base import RegimeStep
from trainer.rollout import RolloutBatch
from trainer.run import RunOptions, RunSetupError, _step, place_worker
from trainer.spool import read_points

GIB = 2**30


@dataclass
class FakeRuntime:
    """A :class:`trainer.devices.DeviceRuntime` that records what is asked of it."""

    available: bool = True
    count: int = 1
    total: int = 80 * GIB
    peak: int = 0
    util: float | None = 42.0
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    def is_available(self) -> bool:
        return self.available

    def device_count(self) -> int:
        return self.count if self.available else 0

    def set_per_process_memory_fraction(self, fraction: float, index: int) -> None:
        self.calls.append(("fraction", fraction, index))

    def mem_get_info(self, index: int) -> tuple[int, int]:
        self.calls.append(("mem_get_info", index))
        return self.total // 2, self.total

    def max_memory_allocated(self, index: int) -> int:
        self.calls.append(("max_memory_allocated", index))
        return self.peak

    def reset_peak_memory_stats(self, index: int) -> None:
        self.calls.append(("reset", index))

    def utilization(self, index: int) -> float | None:
        return self.util


PLAN = {
    "MRL_DEVICES_BY_RANK": "0;1;1;;2,3",
    "MRL_MEMORY_FRACTION_BY_RANK": ";0.6;0.4;;",
}


# --- device choice -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("rank", "expected"),
    [
        (0, WorkerDevice("cuda:0", None, "0")),
        (1, WorkerDevice("cuda:0", 0.6, "1")),
        (2, WorkerDevice("cuda:0", 0.4, "1")),
        (3, WorkerDevice("cpu")),
        (4, WorkerDevice("cuda:0", None, "2,3")),
    ],
)
def test_each_rank_gets_the_first_of_its_visible_devices(rank: int, expected: WorkerDevice) -> None:
    assert devices.choose_device(rank, PLAN, FakeRuntime()) == expected


def test_without_a_plan_every_worker_is_on_the_cpu() -> None:
    runtime = FakeRuntime()
    assert devices.choose_device(0, {}, runtime) == WorkerDevice("cpu")
    assert devices.choose_device(1, {"MRL_DEVICES_BY_RANK": ";"}, runtime).device == "cpu"
    assert runtime.calls == []


def test_a_gpu_plan_on_a_node_without_cuda_fails_naming_rank_and_devices() -> None:
    with pytest.raises(DeviceError) as error:
        devices.choose_device(4, PLAN, FakeRuntime(available=False))
    message = str(error.value)
    assert "rank 4" in message and "2,3" in message and "MRL_DEVICES_BY_RANK" in message
    assert "torch.version.cuda" in message  # how to check the likely cause


def test_a_cpu_rank_keeps_running_on_a_node_without_cuda() -> None:
    assert devices.choose_device(3, PLAN, FakeRuntime(available=False)).device == "cpu"


def test_a_requested_device_overrides_the_plan() -> None:
    runtime = FakeRuntime(count=2)
    assert devices.choose_device(1, PLAN, runtime, "cpu") == WorkerDevice("cpu")
    assert devices.choose_device(3, {}, runtime, "cuda:1").device == "cuda:1"
    with pytest.raises(DeviceError, match="sees 2 CUDA device"):
        devices.choose_device(0, {}, runtime, "cuda:2")
    with pytest.raises(DeviceError, match="unknown device 'tpu'"):
        devices.choose_device(0, {}, runtime, "tpu")


@pytest.mark.parametrize("value", ["abc", "0", "1.5", "-0.25", "nan", "inf", "0,5"])
def test_a_malformed_fraction_names_the_variable_the_rank_and_the_value(value: str) -> None:
    env = {"MRL_DEVICES_BY_RANK": "0;0", "MRL_MEMORY_FRACTION_BY_RANK": f"0.5;{value}"}
    assert devices.choose_device(0, env, FakeRuntime()).memory_fraction == 0.5
    with pytest.raises(DeviceError) as error:
        devices.choose_device(1, env, FakeRuntime())
    message = str(error.value)
    assert "MRL_MEMORY_FRACTION_BY_RANK" in message
    assert "rank 1" in message and repr(value) in message


def test_too_few_entries_name_the_variable_and_the_rank() -> None:
    env = {"MRL_DEVICES_BY_RANK": "0;0", "MRL_MEMORY_FRACTION_BY_RANK": "0.5"}
    with pytest.raises(DeviceError, match=r"FRACTION_BY_RANK='0.5' has 1 entries.*rank 1"):
        devices.choose_device(1, env, FakeRuntime())
    with pytest.raises(DeviceError, match=r"MRL_DEVICES_BY_RANK='0' has 1 entries.*rank 2"):
        devices.choose_device(2, {"MRL_DEVICES_BY_RANK": "0"}, FakeRuntime())


# --- the memory fraction -----------------------------------------------------------------
def test_the_planned_share_caps_the_allocator_of_the_device() -> None:
    runtime = FakeRuntime()
    devices.apply(devices.choose_device(2, PLAN, runtime), runtime)
    assert [c for c in runtime.calls if c[0] == "fraction"] == [("fraction", 0.4, 0)]


@pytest.mark.parametrize("rank", [0, 3, 4])
def test_no_share_no_cap(rank: int) -> None:
    runtime = FakeRuntime()
    devices.apply(devices.choose_device(rank, PLAN, runtime), runtime)
    assert not [c for c in runtime.calls if c[0] == "fraction"]


# --- the fit check -----------------------------------------------------------------------
def test_the_need_is_float32_state_whatever_the_compute_dtype() -> None:
    need = MemoryNeed.estimate(1000)
    assert (need.weights, need.gradients, need.optimizer, need.reference) == (
        4000,
        4000,
        8000,
        4000,
    )
    assert need.total == 20 * 1000
    assert MemoryNeed.estimate(1000, reference_on_device=False).total == 16 * 1000


def test_a_policy_that_fits_its_share_passes() -> None:
    worker = WorkerDevice("cuda:0", 0.25, "0")
    # 1e9 parameters: 16e9 bytes of state = 14.9 GiB <= 0.25 x 80 GiB = 20 GiB (the
    # reference on the CPU; with it on the device, 20e9 bytes = 18.6 GiB, still fits).
    need = devices.fit_check(
        "qwen", 1_000_000_000, "bfloat16", worker, FakeRuntime(), reference_on_cpu=True
    )
    assert need is not None and need.total == 16_000_000_000


def test_a_policy_too_big_for_its_share_fails_with_the_numbers() -> None:
    worker = WorkerDevice("cuda:0", 0.125, "0")
    with pytest.raises(DeviceError) as error:
        devices.fit_check("qwen", 750_000_000, "bfloat16", worker, FakeRuntime())
    message = str(error.value)
    # 7.5e8 x 4 bytes = 2.8 GiB per float32 copy; 5 copies = 14.0 GiB > 0.125 x 80 = 10.0.
    assert message.startswith("policy 'qwen' needs ~14.0 GiB on cuda:0")
    assert "weights 2.8, gradients 2.8, optimizer 5.6, reference 2.8" in message
    assert "planned share is 0.125 of 80.0 GiB = 10.0 GiB" in message
    assert "750,000,000 parameters, float32 state, bfloat16 compute" in message
    assert "device_share" in message and "reference_on_cpu" in message


def test_without_a_cap_the_whole_device_is_the_share() -> None:
    with pytest.raises(DeviceError, match=r"share is 1 of 16.0 GiB = 16.0 GiB"):
        devices.fit_check(
            "big", 1_000_000_000, "float32", WorkerDevice("cuda:0", None, "0"),
            FakeRuntime(total=16 * GIB),
        )  # fmt: skip


def test_the_fit_check_skips_the_cpu() -> None:
    runtime = FakeRuntime(total=1)
    assert devices.fit_check("a", 10**12, "float32", WorkerDevice("cpu"), runtime) is None
    assert runtime.calls == []


def _options(zoo_dir: Path) -> RunOptions:
    config = RunConfig.from_dict(
        {
            "pool": [
                {"name": "a", "model": "zoo:tiny-llama-char"},
                {"name": "b", "model": "zoo:tiny-gpt2-unigram"},
            ],
        }
    )
    dirs = {
        "a": (zoo_dir / "tiny-llama-char",) * 2,
        "b": (zoo_dir / "tiny-gpt2-unigram",) * 2,
    }
    return RunOptions(config=config, run_dir=zoo_dir, steps=1, resume=False, model_dirs=dirs)


def test_placing_a_worker_caps_it_and_checks_its_fit(zoo_dir: Path) -> None:
    env = {"MRL_DEVICES_BY_RANK": "0;0", "MRL_MEMORY_FRACTION_BY_RANK": "0.5;0.5"}
    runtime = FakeRuntime()
    worker = place_worker(1, _options(zoo_dir), runtime, env)
    assert worker == WorkerDevice("cuda:0", 0.5, "0")
    assert ("fraction", 0.5, 0) in runtime.calls and ("mem_get_info", 0) in runtime.calls

    with pytest.raises(RunSetupError, match=r"policy 'b' needs ~.* of 0.0 GiB"):
        place_worker(1, _options(zoo_dir), FakeRuntime(total=1024), env)
    assert place_worker(1, _options(zoo_dir), FakeRuntime(available=False), {}).device == "cpu"


# --- the step's metrics ------------------------------------------------------------------
def test_gpu_metrics_only_on_cuda() -> None:
    runtime = FakeRuntime(peak=3 * GIB // 2)
    cuda = WorkerDevice("cuda:0", None, "0")
    devices.begin_step(cuda, runtime)
    assert runtime.calls == [("reset", 0)]
    assert devices.step_metrics(cuda, runtime) == {m.GPU_MEM_GB: 1.5, m.GPU_UTIL: 42.0}
    runtime.util = None  # no NVML: no utilisation, the memory all the same
    assert devices.step_metrics(cuda, runtime) == {m.GPU_MEM_GB: 1.5}

    cpu_runtime = FakeRuntime(peak=GIB)
    devices.begin_step(WorkerDevice("cpu"), cpu_runtime)
    assert devices.step_metrics(WorkerDevice("cpu"), cpu_runtime) == {}
    assert cpu_runtime.calls == []


def test_the_gpu_metrics_are_in_the_perf_group_of_the_catalogue() -> None:
    for key, unit in ((m.GPU_MEM_GB, "GiB"), (m.GPU_UTIL, "%")):
        info = m.describe(key)
        assert info.group == m.THROUGHPUT and info.unit == unit and info.label != key
        assert key in m.TIMING_KEYS  # machine-dependent: not part of reproducibility


class _StubPolicy:
    name = "a"

    def rollout(self, problems: list[Any]) -> Any:
        batch = RolloutBatch([[1]] * 2, [[2, 3], [4]], ["x", "y"], [True, True])
        return SimpleNamespace(batch=batch)

    def train_step(self, batch: Any) -> dict[str, float]:
        return {m.PG_LOSS: 0.0}

    def rollout_metrics(self, rollouts: Any) -> dict[str, float]:
        return {m.TRAIN_REWARD_MEAN: 0.5}


class _StubRegime:
    def publish(self, policy: Any, rollouts: Any, step: int) -> dict[str, Any]:
        return {}

    def learn(self, policy: Any, rollouts: Any, peers: Any, step: int) -> RegimeStep:
        return RegimeStep(batch=None)  # type: ignore[arg-type]


class _StubExchange:
    def exchange(self, record: StepRecord) -> list[StepRecord]:
        return [record]


@pytest.mark.parametrize("on_cuda", [True, False])
def test_a_step_reports_the_gpu_metrics_of_its_device(on_cuda: bool) -> None:
    config = RunConfig.from_dict({"pool": [{"name": "a", "model": "zoo:tiny-llama-char"}]})
    problems = [SimpleNamespace(id=f"p{i}") for i in range(8)]
    task = SimpleNamespace(train_batch=lambda step, n: problems[:n])
    runtime = FakeRuntime(peak=GIB // 4, util=90.0)
    worker = WorkerDevice("cuda:0", 0.5, "0") if on_cuda else WorkerDevice("cpu")
    record = _step(
        _StubPolicy(), _StubRegime(), _StubExchange(), task, config, 1, 10, [],  # type: ignore[arg-type]
        worker=worker, runtime=runtime,
    )  # fmt: skip
    if on_cuda:
        assert record.metrics[m.GPU_MEM_GB] == 0.25 and record.metrics[m.GPU_UTIL] == 90.0
        assert runtime.calls[0] == ("reset", 0)  # the peak is the step's own
    else:
        assert m.GPU_MEM_GB not in record.metrics and m.GPU_UTIL not in record.metrics
        assert runtime.calls == []
    assert m.STEP_S in record.metrics


# --- the policy's tensors live on its device ---------------------------------------------
def test_the_policy_builds_its_training_tensors_on_its_device(zoo_dir: Path) -> None:
    model_dir = zoo_dir / "tiny-llama-char"
    config = RunConfig.from_dict({"pool": [{"name": "a", "model": str(model_dir)}]})
    policy = Policy(
        config.pool[0], config.grpo, model_dir=model_dir, tokenizer_dir=model_dir,
        reward_fn=lambda *args: [0.0], device="cpu",
    )  # fmt: skip
    assert policy.device == torch.device("cpu")
    assert {p.device.type for p in policy.reference.parameters()} == {"cpu"}
    policy.device = torch.device("meta")  # a device without CUDA: where do tensors go?
    tensors = policy._sequences([[1, 2]], [[3]])
    assert {t.device.type for t in tensors} == {"meta"}


# --- a real run on the CPU -----------------------------------------------------------------
def test_an_explicit_cpu_plan_runs_on_the_cpu_without_gpu_metrics(
    zoo_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(tmp_path, steps=2, val_every=2, checkpoint_every=2, prompts_per_step=8)
    run_dir = tmp_path / "run"
    monkeypatch.setenv("MRL_DEVICES_BY_RANK", ";")  # what a CPU plan gives each rank: ""
    monkeypatch.setenv("MRL_MEMORY_FRACTION_BY_RANK", ";")
    result = _trainer(zoo_dir, "run", "--config", config, "--run-dir", run_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    keys = {(p["policy"], p["key"]) for p in read_points(run_dir)}
    for policy in ("llama-char", "gpt2-unigram"):
        assert (policy, m.PG_LOSS) in keys and (policy, m.STEP_S) in keys
    assert not {key for _, key in keys if key.startswith("perf/gpu_")}
    assert "llama-char runs on cpu" in result.stderr
