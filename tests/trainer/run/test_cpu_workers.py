"""CPU workers sized for a workstation (issue 33): idle OpenMP threads sleep
(``OMP_WAIT_POLICY=PASSIVE``, set before torch loads) and each worker's intra-op thread
count comes from the plan; GPU workers keep what they had."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.jobs import JobSpec, placement_fields, render_script
from trainer import devices
from trainer.devices import CPU_THREADS_ENV, DEVICES_ENV, WAIT_POLICY_ENV, DeviceError
from trainer.mwra import PolicyDemand, plan_placement

REPO = Path(__file__).resolve().parents[3]
B = 1_000_000_000


# --- the worker's environment and threads (pure) ------------------------------------------
@pytest.mark.parametrize(
    "env",
    [{}, {DEVICES_ENV: ""}, {DEVICES_ENV: ";"}, {DEVICES_ENV: " ; ;"}],
    ids=["no plan", "one cpu rank", "two cpu ranks", "blank entries"],
)
def test_a_cpu_job_gets_the_passive_wait_policy(env: dict[str, str]) -> None:
    assert devices.is_cpu_job(env)
    assert devices.cpu_worker_env(env) == {WAIT_POLICY_ENV: "PASSIVE"}


@pytest.mark.parametrize("plan", ["0", "0,1;2", ";0"])
def test_a_job_with_gpus_keeps_openmps_defaults(plan: str) -> None:
    assert not devices.is_cpu_job({DEVICES_ENV: plan})
    assert devices.cpu_worker_env({DEVICES_ENV: plan}) == {}


def test_a_wait_policy_already_set_is_kept() -> None:
    assert devices.cpu_worker_env({WAIT_POLICY_ENV: "ACTIVE"}) == {}


def test_the_plans_threads_win_over_the_share_of_the_cpus() -> None:
    env = {CPU_THREADS_ENV: "3;2"}
    assert devices.cpu_threads(0, 2, env, available=64) == 3
    assert devices.cpu_threads(1, 2, env, available=64) == 2


@pytest.mark.parametrize(
    ("world_size", "available", "threads"), [(1, 8, 8), (2, 8, 4), (3, 8, 2), (4, 2, 1)]
)
def test_without_a_plan_the_workers_share_the_cpus_they_may_use(
    world_size: int, available: int, threads: int
) -> None:
    assert devices.cpu_threads(0, world_size, {}, available) == threads
    assert devices.cpu_threads(0, world_size, {CPU_THREADS_ENV: ""}, available) == threads


@pytest.mark.parametrize("entry", ["0", "-1", "two", "1.5"])
def test_a_bad_thread_count_names_the_rank_and_the_fix(entry: str) -> None:
    with pytest.raises(DeviceError, match=rf"{CPU_THREADS_ENV}: rank 0's entry.*whole number"):
        devices.cpu_threads(0, 1, {CPU_THREADS_ENV: entry}, available=4)


def test_a_gpu_worker_keeps_its_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer.run import worker_threads

    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    gpu = devices.WorkerDevice("cuda:0", None, "0")
    assert worker_threads(0, 4, gpu, {CPU_THREADS_ENV: "1;1;1;1"}) == 4  # as before: 16 // 4
    assert worker_threads(0, 4, devices.WorkerDevice("cpu"), {CPU_THREADS_ENV: "1;1;1;1"}) == 1


def test_prepare_cpu_workers_sets_the_environment_spawned_workers_inherit() -> None:
    from trainer.run import prepare_cpu_workers

    env: dict[str, str] = {}
    assert prepare_cpu_workers(env) == {WAIT_POLICY_ENV: "PASSIVE"}
    assert env == {WAIT_POLICY_ENV: "PASSIVE"}
    gpu_env = {DEVICES_ENV: "0;1"}
    assert prepare_cpu_workers(gpu_env) == {} and WAIT_POLICY_ENV not in gpu_env


# --- the job script ----------------------------------------------------------------------
def _spec(**fields: object) -> JobSpec:
    return JobSpec(
        run_id=7,
        name="demo",
        run_dir=Path("/tmp/runs/run-7"),
        python="/usr/bin/python3",
        workdir=Path("/tmp/repo"),
        n_policies=2,
        **fields,  # type: ignore[arg-type]
    )


def test_a_cpu_plans_script_exports_the_wait_policy_and_each_ranks_threads() -> None:
    plan = plan_placement([PolicyDemand("a", B), PolicyDemand("b", B)], gpus=0, cpus=6)
    fields = placement_fields(plan, slurm=False)
    assert fields["cpu_threads"] == 3
    for slurm in (False, True):
        script = render_script(_spec(**fields), slurm=slurm)
        assert 'export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"' in script
        assert f"export {CPU_THREADS_ENV}='3;3'" in script
        # Set before the trainer (and so torch) starts.
        assert script.index("OMP_WAIT_POLICY") < script.index(" -m trainer run")


def test_a_cpu_job_without_a_plan_gets_the_wait_policy_but_no_thread_counts() -> None:
    script = render_script(_spec(**placement_fields(None)), slurm=False)
    assert "OMP_WAIT_POLICY" in script and CPU_THREADS_ENV not in script


def test_a_gpu_jobs_script_leaves_openmp_alone() -> None:
    plan = plan_placement([PolicyDemand("a", B), PolicyDemand("b", B)], gpus=2, cpus_per_gpu=4)
    fields = placement_fields(plan)
    assert "cpu_threads" not in fields
    script = render_script(_spec(**fields), slurm=True)
    assert "OMP_WAIT_POLICY" not in script and CPU_THREADS_ENV not in script


def test_a_bad_thread_count_is_refused_by_the_job_spec() -> None:
    with pytest.raises(ValueError, match="cpu_threads"):
        _spec(cpu_threads=-1)


# --- the real entry point ----------------------------------------------------------------
SPY = """
import builtins, json, os, sys
seen = {}
real_import = builtins.__import__
def spy(name, *args, **kwargs):
    if name == "torch" and "torch" not in sys.modules and "torch" not in seen:
        seen["torch"] = os.environ.get("OMP_WAIT_POLICY")
    return real_import(name, *args, **kwargs)
builtins.__import__ = spy
from trainer import cli
cli.main(["run", "--config", sys.argv[1], "--run-dir", sys.argv[2]])
print(json.dumps(seen))
"""


def test_the_cli_sets_the_wait_policy_before_torch_loads(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in (WAIT_POLICY_ENV, DEVICES_ENV)}
    result = subprocess.run(
        [sys.executable, "-c", SPY, str(tmp_path / "missing.json"), str(tmp_path / "run")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"torch": "PASSIVE"}


def test_a_cpu_evaluation_job_gets_the_wait_policy_too(tmp_path: Path) -> None:
    from scheduler.jobs import EvalCommand, render_eval_script

    suite = tmp_path / "suite.json"
    cpu = render_eval_script(_spec(), EvalCommand(suite_path=suite), slurm=False)
    gpu = render_eval_script(_spec(), EvalCommand(suite_path=suite, device="cuda"), slurm=False)
    assert cpu.index("OMP_WAIT_POLICY") < cpu.index(" -m trainer eval-run")
    assert "OMP_WAIT_POLICY" not in gpu


# --- bfloat16 on the CPU -----------------------------------------------------------------
def test_bfloat16_on_the_cpu_says_whether_the_cpu_has_it_natively(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from trainer import policy

    assert policy.cpu_bf16_support() in (None, "AMX", "AVX512-BF16")
    cpu = torch.device("cpu")
    with caplog.at_level("INFO", logger="trainer.policy"):
        monkeypatch.setattr(policy, "cpu_bf16_support", lambda: None)
        assert policy._compute_dtype("bfloat16", cpu) == torch.bfloat16
        monkeypatch.setattr(policy, "cpu_bf16_support", lambda: "AMX")
        assert policy._compute_dtype("bfloat16", cpu) == torch.bfloat16
        assert policy._compute_dtype("float32", cpu) == torch.float32
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2
    assert "without native bfloat16" in messages[0] and "set dtype to 'float32'" in messages[0]
    assert "native AMX" in messages[1]


@pytest.mark.parametrize(
    ("capability", "says"),
    [("AVX2", "a backward pass measured 23x slower"), ("AVX512", "steps gain less")],
)
def test_bfloat16_without_native_support_says_what_this_cpu_costs(
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    capability: str,
    says: str,
) -> None:
    """An AVX2-only CPU converts bfloat16 so slowly (backward 23x float32's on SmolLM2)
    that the log says so, instead of the AVX-512 case's milder "gain less"."""
    import torch

    from trainer import policy

    monkeypatch.setattr(policy, "cpu_bf16_support", lambda: None)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    with caplog.at_level("WARNING", logger="trainer.policy"):
        policy._compute_dtype("bfloat16", torch.device("cpu"))
    (message,) = [record.getMessage() for record in caplog.records]
    assert says in message and f"CPU capability: {capability}" in message


def test_the_form_offers_every_dtype_with_the_cpu_advice() -> None:
    from dataclasses import fields

    from trainer.config import DTYPES, PolicyConfig

    dtype = next(spec for spec in fields(PolicyConfig) if spec.name == "dtype")
    assert dtype.default == "float32"  # existing runs unchanged
    assert tuple(dtype.metadata["choices"]) == DTYPES
    assert "AVX512-BF16" in dtype.metadata["help"] and "CPU" in dtype.metadata["help"]
