"""Slurm for GPUs: the batch script's GPU and CPU request from the MWRA plan, the plan's
per-rank memory fractions (``MRL_MEMORY_FRACTION_BY_RANK``) and the job's Python per
partition (``MRL_PARTITIONS[...]["python"]``). Pure: no Slurm, no worker."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scheduler import run_job
from scheduler.jobs import (
    JobSpec,
    JobSpecError,
    memory_fraction_text,
    placement_fields,
    placement_json,
    render_eval_script,
    render_script,
    sbatch_args,
)
from scheduler.run_job import job_spec
from tests.scheduler.test_jobs import INJECTIONS, spec
from trainer.mwra import PlacementPlan, PolicyDemand, plan_placement
from webapp.runs import services
from webapp.runs.models import Experiment, Run

B = 1_000_000_000
# Options that, beside --gres and --cpus-per-task, would ask for GPUs or CPUs a second
# way (Slurm refuses --cpus-per-gpu with --cpus-per-task).
CONFLICTING = ("--gpus=", "--gpus-per-task", "--gpus-per-node", "--cpus-per-gpu", "--gpus-per")


def plan_spec(plan: PlacementPlan, **overrides: Any) -> JobSpec:
    """The spec ``run_job.job_spec`` makes of ``plan`` (without a run)."""
    fields: dict[str, Any] = {
        "n_policies": len(plan.policies),
        "mem_gb": plan.slurm.mem_gb or 4,
        **placement_fields(plan),
    }
    fields.update(overrides)
    return spec(**fields)


def sbatch_lines(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.startswith("#SBATCH")]


def option_of(line: str) -> str:
    """``"--gres=gpu:2"`` of ``"#SBATCH --gres=gpu:2"``, less the partition's own name."""
    option = line.removeprefix("#SBATCH ")
    return "" if option.startswith("--partition=") else option


def env_line(script: str, name: str) -> str | None:
    lines = [line for line in script.splitlines() if line.startswith(f"export {name}=")]
    assert len(lines) <= 1
    return lines[0] if lines else None


# --- the GPU and CPU request ---------------------------------------------------------------
def test_a_two_gpu_per_node_plan_asks_per_node_gres_and_the_plans_cpus(tmp_path: Path) -> None:
    # 4 GPUs over nodes of 2: two nodes, one policy each with both of its node's GPUs;
    # 4 CPUs per GPU x 2 GPUs of the task = 8 CPUs per task.
    plan = plan_placement(
        [PolicyDemand("big", 7 * B), PolicyDemand("small", B)],
        gpus=4,
        gpus_per_node=2,
        cpus_per_gpu=4,
        mem_gb=64,
    )
    assert [p.devices for p in plan.policies] == [(0, 1), (0, 1)]
    script = render_script(plan_spec(plan), slurm=True)
    header = sbatch_lines(script)

    for line in [
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks=2",
        "#SBATCH --gres=gpu:2",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH --mem=64G",
    ]:
        assert header.count(line) == 1, line
    # The script asks for exactly what the compose preview shows (sbatch_args).
    for arg in sbatch_args(plan.slurm):
        assert f"#SBATCH {arg}" in header, arg
    assert [line for line in header if "gpu" in option_of(line)] == ["#SBATCH --gres=gpu:2"]
    assert [line for line in header if "cpu" in option_of(line)] == ["#SBATCH --cpus-per-task=8"]
    assert not any(option in line for line in header for option in CONFLICTING)
    assert env_line(script, "MRL_DEVICES_BY_RANK") == "export MRL_DEVICES_BY_RANK='0,1;0,1'"
    assert env_line(script, "MRL_MEMORY_FRACTION_BY_RANK") == (
        "export MRL_MEMORY_FRACTION_BY_RANK='1;1'"
    )
    path = tmp_path / "run.sbatch"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_cpus_per_task_split_the_nodes_cpus_per_gpu_between_its_tasks() -> None:
    # One node of 2 GPUs, two policies of one GPU each: 3 CPUs per GPU x 2 GPUs over 2
    # tasks = 3 CPUs per task, still as --cpus-per-task (never --cpus-per-gpu).
    plan = plan_placement(
        [PolicyDemand("a", B), PolicyDemand("b", B)], gpus=2, gpus_per_node=2, cpus_per_gpu=3
    )
    header = sbatch_lines(render_script(plan_spec(plan), slurm=True))

    assert "#SBATCH --gres=gpu:2" in header and "#SBATCH --cpus-per-task=3" in header
    assert not any(option in line for line in header for option in CONFLICTING)


def test_a_cpu_plan_asks_for_no_gpus() -> None:
    plan = plan_placement([PolicyDemand("a", 7 * B), PolicyDemand("b", B)], gpus=0, cpus=8)
    script = render_script(plan_spec(plan), slurm=True)
    header = sbatch_lines(script)

    assert "#SBATCH --cpus-per-task=4" in header and "#SBATCH --ntasks=2" in header
    assert not any("gres" in option_of(line) or "gpu" in option_of(line) for line in header)
    assert env_line(script, "MRL_DEVICES_BY_RANK") is None
    assert env_line(script, "MRL_MEMORY_FRACTION_BY_RANK") is None


def test_an_evaluation_job_keeps_to_the_same_rule() -> None:
    from scheduler.jobs import EvalCommand

    eval_spec = spec(n_policies=1, gpus_per_node=1, cuda_visible_devices=())
    command = EvalCommand(suite_path=Path("/srv/runs/run-7/evals/job-1/suite.json"))
    header = sbatch_lines(render_eval_script(eval_spec, command, slurm=True))

    assert "#SBATCH --gres=gpu:1" in header and "#SBATCH --cpus-per-task=4" in header
    assert not any(option in line for line in header for option in CONFLICTING)


# --- memory fractions ------------------------------------------------------------------------
def test_shared_devices_export_the_plans_fractions_by_rank() -> None:
    # Three policies on two GPUs: the largest alone on device 0, the two others halving
    # device 1.
    plan = plan_placement(
        [PolicyDemand("big", 3 * B), PolicyDemand("s1", B), PolicyDemand("s2", B)], gpus=2
    )
    assert [p.memory_fraction for p in plan.policies] == [1.0, 0.5, 0.5]
    script = render_script(plan_spec(plan), slurm=True)

    assert env_line(script, "MRL_DEVICES_BY_RANK") == "export MRL_DEVICES_BY_RANK='0;1;1'"
    assert env_line(script, "MRL_MEMORY_FRACTION_BY_RANK") == (
        "export MRL_MEMORY_FRACTION_BY_RANK='1;0.5;0.5'"
    )
    lines = script.splitlines()
    assert lines.index(env_line(script, "MRL_MEMORY_FRACTION_BY_RANK")) == (
        lines.index(env_line(script, "MRL_DEVICES_BY_RANK")) + 1
    )


def test_fractions_are_exported_exactly_and_quoted_with_empty_fields_kept() -> None:
    script = render_script(spec(memory_fractions=("0.45", "", "0.0001")), slurm=False)

    assert env_line(script, "MRL_MEMORY_FRACTION_BY_RANK") == (
        "export MRL_MEMORY_FRACTION_BY_RANK='0.45;;0.0001'"
    )
    export = env_line(script, "MRL_MEMORY_FRACTION_BY_RANK")
    assert export is not None
    out = subprocess.run(
        ["bash", "-c", export + '\nprintf %s "$MRL_MEMORY_FRACTION_BY_RANK"'],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == "0.45;;0.0001"
    assert out.stdout.split(";") == ["0.45", "", "0.0001"]  # rank i: the i-th field


@pytest.mark.parametrize("fractions", [(), ("",), ("", "", "")])
def test_no_fraction_no_variable(fractions: tuple[str, ...]) -> None:
    for slurm in (True, False):
        script = render_script(spec(memory_fractions=fractions), slurm=slurm)
        assert "MRL_MEMORY_FRACTION_BY_RANK" not in script


@pytest.mark.parametrize(
    "bad",
    [
        *("0", "0.0", "0.0000", "1.5", "1.01", "2", "-0.5", ".5", "0.", "0.12345"),
        *("1e-1", "nan", "inf", " 0.5", "0.5 ", "0,5", "0.45;0.55", "0.5\n", "+0.5"),
    ],
)
def test_a_bad_fraction_is_refused_naming_the_field(bad: str) -> None:
    with pytest.raises(JobSpecError) as error:
        spec(memory_fractions=("0.5", bad))
    assert error.value.field == "memory_fractions"
    assert "memory_fractions" in str(error.value)


@pytest.mark.parametrize("payload", [p for p in INJECTIONS if p])
def test_fractions_refuse_injection_payloads(payload: str) -> None:
    with pytest.raises(JobSpecError) as error:
        spec(memory_fractions=(payload,))
    assert error.value.field == "memory_fractions"


def test_fractions_must_be_strings_in_a_tuple() -> None:
    with pytest.raises(JobSpecError, match="memory_fractions"):
        spec(memory_fractions=(0.5,))
    with pytest.raises(JobSpecError, match="memory_fractions"):
        spec(memory_fractions="0.5")


@pytest.mark.parametrize("good", ["", "0.45", "0.5", "0.0001", "0.9999", "1", "1.0", "1.0000"])
def test_good_fractions_pass(good: str) -> None:
    assert spec(memory_fractions=(good,)).memory_fractions == (good,)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, ""),
        (0.45, "0.45"),
        (0.5, "0.5"),
        (1.0, "1"),
        (1, "1"),
        (0.6666, "0.6666"),
        (0.33333333, "0.3333"),  # rounded down, as MWRA does: shares stay <= 1
        (0.0001, "0.0001"),
    ],
)
def test_memory_fraction_text(value: float | None, text: str) -> None:
    assert memory_fraction_text(value) == text
    spec(memory_fractions=(text,))  # and the spec takes it


@pytest.mark.parametrize("value", [0.0, 0.00001, -0.5, 1.5, float("nan"), float("inf"), True])
def test_a_fraction_out_of_range_gives_text_the_spec_refuses(value: float) -> None:
    with pytest.raises(JobSpecError, match="memory_fractions"):
        spec(memory_fractions=(memory_fraction_text(value),))


# --- from the experiment's stored plan, and the Python per partition ------------------------
GPU_PYTHON = "/opt/gpu-env/bin/python"


@pytest.fixture
def partitions(settings: Any) -> dict[str, dict[str, Any]]:
    settings.JOB_PYTHON = "/opt/default/bin/python"
    settings.PARTITIONS = {
        "local": {"nodes": 1, "gpus_per_node": 0, "cpus_per_node": 2, "mem_gb_per_node": 4},
        "gpu": {"nodes": 2, "gpus_per_node": 2, "cpus_per_node": 16, "python": GPU_PYTHON},
        "cpu": {"nodes": 4, "gpus_per_node": 0, "cpus_per_node": 32},
    }
    return settings.PARTITIONS


@pytest.fixture
def run_on(make_experiment: Callable[..., Experiment]) -> Callable[..., Run]:
    def make(partition: str, backend: str = "slurm", plan: PlacementPlan | None = None) -> Run:
        experiment = make_experiment(seeds=(0,))
        experiment.resources = {"backend": backend, "partition": partition, "mem_gb": 8}
        if plan is not None:
            experiment.resources["placement"] = placement_json(plan)
        experiment.save()
        run = services.runs_create(experiment, state=Run.State.QUEUED)[0]
        run.backend = backend
        return run

    return make


SHARED_PLAN = plan_placement(
    [PolicyDemand("big", 3 * B), PolicyDemand("s1", B), PolicyDemand("s2", B)],
    gpus=2,
    gpus_per_node=2,
)


@pytest.mark.django_db
def test_job_spec_carries_the_stored_plans_fractions(
    partitions: Any, run_on: Callable[..., Run]
) -> None:
    job = job_spec(run_on("gpu", plan=SHARED_PLAN))

    assert job.memory_fractions == ("1", "0.5", "0.5")
    assert job.cuda_visible_devices == ("0", "1", "1")
    assert (job.nodes, job.gpus_per_node) == (1, 2)
    script = render_script(job, slurm=True)
    assert "export MRL_MEMORY_FRACTION_BY_RANK='1;0.5;0.5'" in script.splitlines()


@pytest.mark.django_db
def test_job_spec_of_a_cpu_plan_has_no_fractions(
    partitions: Any, run_on: Callable[..., Run]
) -> None:
    plan = plan_placement([PolicyDemand(f"p{i}", B) for i in range(3)], gpus=0)
    job = job_spec(run_on("cpu", plan=plan))

    assert job.memory_fractions == () and job.cuda_visible_devices == ()
    assert "MRL_MEMORY_FRACTION_BY_RANK" not in render_script(job, slurm=True)


@pytest.mark.django_db
def test_job_spec_without_a_plan_has_no_fractions(
    partitions: Any, run_on: Callable[..., Run]
) -> None:
    assert job_spec(run_on("gpu")).memory_fractions == ()


@pytest.mark.django_db
def test_a_stored_fraction_out_of_range_fails_the_spec_naming_the_field(
    partitions: Any, run_on: Callable[..., Run]
) -> None:
    run = run_on("gpu", plan=SHARED_PLAN)
    run.experiment.resources["placement"]["policies"][1]["memory_fraction"] = 1.5
    with pytest.raises(JobSpecError) as error:
        job_spec(run)
    assert error.value.field == "memory_fractions"


@pytest.mark.django_db
def test_the_partitions_python_runs_jobs_on_that_partition(
    partitions: Any, run_on: Callable[..., Run]
) -> None:
    job = job_spec(run_on("gpu", plan=SHARED_PLAN))

    assert job.python == GPU_PYTHON
    assert f"srun --kill-on-bad-exit=1 {GPU_PYTHON} -m trainer run" in render_script(
        job, slurm=True
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("partition", "backend"),
    [("cpu", "slurm"), ("", "slurm"), ("unlisted", "slurm"), ("local", "local")],
)
def test_other_partitions_run_the_default_python(
    partitions: Any, run_on: Callable[..., Run], partition: str, backend: str
) -> None:
    assert job_spec(run_on(partition, backend=backend)).python == "/opt/default/bin/python"


@pytest.mark.django_db
def test_a_local_run_ignores_a_partitions_python(
    partitions: Any, run_on: Callable[..., Run]
) -> None:
    # The local backend has no partition: the job runs this machine's MRL_JOB_PYTHON.
    partitions["local"]["python"] = GPU_PYTHON
    assert job_spec(run_on("local", backend="local")).python == "/opt/default/bin/python"


@pytest.mark.django_db
@pytest.mark.parametrize("bad", ["bin/python", "/opt/my env/python", "/opt/$(id)/python", 3])
def test_a_bad_partition_python_fails_the_spec_naming_the_field(
    partitions: Any, run_on: Callable[..., Run], bad: Any
) -> None:
    partitions["gpu"]["python"] = bad
    with pytest.raises(JobSpecError) as error:
        job_spec(run_on("gpu"))
    assert error.value.field == "python"
    assert "MRL_PARTITIONS['gpu']['python']" in str(error.value)


@pytest.mark.django_db
def test_a_bad_partition_python_fails_the_run_at_submission(
    partitions: Any, run_on: Callable[..., Run], backend: Any
) -> None:
    from scheduler.submit import submit

    partitions["gpu"]["python"] = "python3"
    run = run_on("gpu")
    run.save()

    assert submit(run.pk) == "failed"
    run.refresh_from_db()
    assert run.state == Run.State.FAILED and "python" in run.failure_reason
    assert backend.submitted == []


@pytest.mark.django_db
def test_the_compose_form_still_reads_a_partition_with_a_python(partitions: Any) -> None:
    from webapp.runs.forms.resources import ResourcesForm

    data = {"backend": "slurm", "partition": "gpu", "gpus": 4, "cpus_per_gpu": 8}
    form = ResourcesForm(data={**data, "time_limit": "01:00:00"})
    assert form.is_valid(), form.errors
    assert ("gpu", "gpu (2 node(s) x 2 GPU(s))") in form.fields["partition"].choices
    too_many = ResourcesForm(data={**data, "gpus": 5, "time_limit": "01:00:00"})
    assert not too_many.is_valid() and "gpus" in too_many.errors


def test_job_python_reads_settings_at_each_call(partitions: Any) -> None:
    assert run_job.job_python("gpu") == GPU_PYTHON
    assert run_job.job_python("cpu") == "/opt/default/bin/python"
    assert run_job.job_python("") == "/opt/default/bin/python"
