"""A pool across machines (issue 22), without Slurm: the job spec's per-rank nodes, the
batch script that lays the ranks out on them and names the rendezvous, and what the
status sync learns from the workers' records and srun's last words. (The real two-node
cluster: tests/scheduler/test_multinode_layout.py and tests/integration.)"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scheduler.backends import JobStatus
from scheduler.jobs import (
    RENDEZVOUS_PORT_BASE,
    RENDEZVOUS_PORT_SPAN,
    JobSpec,
    JobSpecError,
    multinode_lines,
    placement_fields,
    placement_json,
    render_script,
    sbatch_args,
    sbatch_header,
)
from scheduler.run_job import failed_workers, job_spec, status_apply, worker_nodes
from scheduler.submit import submit
from scheduler.sync import sync
from tests.scheduler.conftest import FakeBackend
from tests.scheduler.test_jobs import INJECTIONS, spec
from trainer.mwra import PlacementPlan, PolicyDemand, plan_placement
from trainer.rendezvous import worker_record, write_worker_record
from webapp.runs import services
from webapp.runs.models import Experiment, Run

B = 1_000_000_000
# 5B opens node 0, both 3B policies go to node 1: ranks on nodes (0, 1, 1).
TWO_NODE_PLAN = plan_placement(
    [PolicyDemand("llama", 5 * B), PolicyDemand("qwen", 3 * B), PolicyDemand("gpt2", 3 * B)],
    gpus=0,
    nodes=2,
)


def multinode_spec(**overrides: Any) -> JobSpec:
    """A CPU job of three policies on two nodes, rank 0 on the second node."""
    fields: dict[str, Any] = {
        "partition": "multinode",
        "nodes": 2,
        "gpus_per_node": 0,
        "cpus_per_task": 1,
        "mem_gb": 8,
        "cuda_visible_devices": (),
        "node_by_rank": (1, 0, 1),
    }
    fields.update(overrides)
    return spec(**fields)


def sbatch_lines(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.startswith("#SBATCH")]


def srun_line(script: str) -> str:
    lines = [line for line in script.splitlines() if line.startswith("srun ")]
    assert len(lines) == 1, lines
    return lines[0]


# --- the spec's nodes per rank ------------------------------------------------------------
def test_a_multinode_spec_keeps_each_ranks_node() -> None:
    job = multinode_spec()

    assert job.node_by_rank == (1, 0, 1)
    assert job.tasks_per_node == 2  # node 1 holds ranks 0 and 2


@pytest.mark.parametrize(
    ("node_by_rank", "fragment"),
    [
        ((0, 1), "one node per policy (3); got 2"),
        ((0, 1, 1, 0), "one node per policy (3); got 4"),
        ((0, 0, 0), "node indices 0..1, each used at least once"),
        ((0, 1, 2), "node indices 0..1"),
        ((-1, 0, 1), "node indices 0..1"),
        (("0", "1", "1"), "whole-number node indices"),
        ((0, "1; rm -rf /", 1), "whole-number node indices"),
        ((0.0, 1.0, 1.0), "whole-number node indices"),
        ((False, True, True), "whole-number node indices"),
    ],
)
def test_bad_node_lists_are_refused_naming_the_field(
    node_by_rank: tuple[Any, ...], fragment: str
) -> None:
    with pytest.raises(JobSpecError) as error:
        multinode_spec(node_by_rank=node_by_rank)

    assert error.value.field == "node_by_rank"
    assert fragment in str(error.value)


@pytest.mark.parametrize("payload", [p for p in INJECTIONS if p])
def test_node_lists_refuse_injection_payloads(payload: str) -> None:
    with pytest.raises(JobSpecError) as error:
        multinode_spec(node_by_rank=(0, 1, payload))
    assert error.value.field == "node_by_rank"


def test_several_nodes_need_a_node_for_every_rank() -> None:
    with pytest.raises(JobSpecError) as error:
        multinode_spec(node_by_rank=())

    assert error.value.field == "node_by_rank"
    assert "a job on several nodes places every rank" in str(error.value)


def test_a_one_node_spec_holds_every_policy_on_its_node() -> None:
    assert spec(n_policies=3).tasks_per_node == 3
    assert spec(n_policies=3, node_by_rank=(0, 0, 0)).tasks_per_node == 3


# --- the plan's fields --------------------------------------------------------------------
def test_a_two_node_cpu_plan_gives_a_slurm_job_its_nodes_per_rank() -> None:
    assert [p.node for p in TWO_NODE_PLAN.policies] == [0, 1, 1]

    fields = placement_fields(TWO_NODE_PLAN, slurm=True)

    assert fields == {
        "nodes": 2,
        "gpus_per_node": 0,
        "cpus_per_task": 1,
        "cpu_threads": 1,
        "cuda_visible_devices": (),
        "memory_fractions": (),
        "node_by_rank": (0, 1, 1),
    }
    job = spec(n_policies=3, **fields)
    assert (job.nodes, job.tasks_per_node) == (2, 2)


def test_the_local_backend_runs_a_two_node_plan_on_one_machine() -> None:
    fields = placement_fields(TWO_NODE_PLAN, slurm=False)

    assert (fields["nodes"], fields["node_by_rank"]) == (1, ())
    assert spec(n_policies=3, **fields).tasks_per_node == 3


def test_a_one_node_cpu_plan_places_no_ranks() -> None:
    plan = plan_placement([PolicyDemand("a", B), PolicyDemand("b", B)], gpus=0)

    assert placement_fields(plan, slurm=True)["node_by_rank"] == ()
    assert placement_fields(None) == {"nodes": 1, "gpus_per_node": 0, "cpus_per_task": 1}


def test_a_two_node_cpu_plan_asks_every_node_for_the_busiest_nodes_tasks() -> None:
    plan = plan_placement(
        [PolicyDemand("llama", 5 * B), PolicyDemand("qwen", 3 * B), PolicyDemand("gpt2", 3 * B)],
        gpus=0,
        nodes=2,
        cpus=6,
        mem_gb=8,
    )

    assert sbatch_args(plan.slurm) == [
        "--nodes=2",
        "--ntasks=4",
        "--ntasks-per-node=2",
        "--cpus-per-task=2",
        "--mem=8G",
    ]
    assert placement_json(plan)["slurm"]["sbatch_args"] == sbatch_args(plan.slurm)
    assert PlacementPlan.from_dict(placement_json(plan)) == plan


# --- the batch script ---------------------------------------------------------------------
def test_the_header_of_a_multinode_job_asks_room_for_the_busiest_node() -> None:
    header = sbatch_header(multinode_spec(), ntasks=3, requeue=True)

    assert "#SBATCH --nodes=2" in header
    assert [line for line in header if line.startswith("#SBATCH --ntasks")] == [
        "#SBATCH --ntasks=4",
        "#SBATCH --ntasks-per-node=2",
    ]
    assert "#SBATCH --partition=multinode" in header
    assert not any("gres" in line or "gpu" in line for line in header)


def test_the_script_of_a_two_node_plan_asks_what_the_preview_shows() -> None:
    job = spec(n_policies=3, mem_gb=8, **placement_fields(TWO_NODE_PLAN))
    header = sbatch_lines(render_script(job, slurm=True))

    for arg in sbatch_args(TWO_NODE_PLAN.slurm):
        assert header.count(f"#SBATCH {arg}") == 1, arg


def test_a_multinode_script_lays_the_ranks_out_from_a_hostfile(tmp_path: Path) -> None:
    script = render_script(multinode_spec(), slurm=True)
    lines = script.splitlines()

    for line in [
        'mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        "node_by_rank=(1 0 1)",
        'hostfile="$RUN_DIR/job/hosts-$SLURM_JOB_ID"',
        'export SLURM_HOSTFILE="$hostfile"',
        "unset SLURM_NTASKS_PER_NODE",
        'rank0_host="${hosts[${node_by_rank[0]}]}"',
        'MASTER_ADDR="$(sinfo -h -N -n "$rank0_host" -o %o | head -n 1)"',
        'export MASTER_ADDR="${MASTER_ADDR:-$rank0_host}"',
        "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))",
    ]:
        assert lines.count(line) == 1, line
    srun = srun_line(script)
    assert srun.startswith("srun --kill-on-bad-exit=1 --distribution=arbitrary --ntasks=3 ")
    assert "/opt/venv/bin/python -m trainer run" in srun
    # The layout is set up before the step starts.
    assert lines.index('export SLURM_HOSTFILE="$hostfile"') < lines.index(srun)
    path = tmp_path / "run.sbatch"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_a_one_node_pool_script_has_no_hostfile_and_no_arbitrary_layout(tmp_path: Path) -> None:
    script = render_script(spec(), slurm=True)  # three policies on one node of 2 GPUs

    assert "hostfile" not in script and "SLURM_HOSTFILE" not in script
    assert "--distribution=arbitrary" not in script and "node_by_rank" not in script
    assert "--ntasks-per-node" not in script
    assert srun_line(script).startswith("srun --kill-on-bad-exit=1 /opt/venv/bin/python ")
    assert 'rank0_host="${hosts[0]}"' in script.splitlines()
    assert "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))" in script.splitlines()
    path = tmp_path / "run.sbatch"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_a_one_policy_job_needs_no_rendezvous() -> None:
    script = render_script(spec(n_policies=1, cuda_visible_devices=("0,1",)), slurm=True)

    assert "srun" not in script and "MASTER_ADDR" not in script and "scontrol show" not in script


# --- the layout lines, run in bash with a stand-in scontrol and sinfo --------------------
def _stand_in(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _run_layout(tmp_path: Path, job: JobSpec, sinfo_body: str) -> dict[str, str]:
    """Run ``multinode_lines(job)`` as the batch shell would and report what it set."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # scontrol show hostnames: the allocation, in Slurm's order.
    _stand_in(bin_dir, "scontrol", 'printf "%s\\n" mrl-node1 mrl-node2')
    _stand_in(bin_dir, "sinfo", sinfo_body)
    run_dir = tmp_path / "run"
    (run_dir / "job").mkdir(parents=True)
    script = "\n".join(
        [
            "set -uo pipefail",
            f"RUN_DIR={run_dir}",
            *multinode_lines(job),
            'echo "MASTER_ADDR=$MASTER_ADDR"',
            'echo "MASTER_PORT=$MASTER_PORT"',
            'echo "SLURM_HOSTFILE=${SLURM_HOSTFILE:-}"',
            'echo "SLURM_NTASKS_PER_NODE=${SLURM_NTASKS_PER_NODE:-unset}"',
        ]
    )
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "123457",
        "SLURM_JOB_NODELIST": "mrl-node[1-2]",
        "SLURM_NTASKS_PER_NODE": "2",
    }
    result = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, check=True, timeout=30
    )
    said = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    said["hosts"] = (run_dir / "job" / "hosts-123457").read_text() if said["SLURM_HOSTFILE"] else ""
    return said


def test_the_hostfile_puts_each_rank_on_its_planned_node_and_rank_0s_addr_is_master(
    tmp_path: Path,
) -> None:
    # sinfo -n <node> -o %o: the node's NodeAddr; only mrl-node2 is asked for.
    sinfo = '[[ "$*" == *"-n mrl-node2"* ]] && echo 10.0.0.2 || echo wrong-node'
    said = _run_layout(tmp_path, multinode_spec(), sinfo)

    assert said["hosts"] == "mrl-node2\nmrl-node1\nmrl-node2\n"
    assert said["SLURM_HOSTFILE"].endswith("/run/job/hosts-123457")
    assert said["MASTER_ADDR"] == "10.0.0.2"
    port = int(said["MASTER_PORT"])
    assert port == RENDEZVOUS_PORT_BASE + 123457 % RENDEZVOUS_PORT_SPAN == 23457
    assert said["SLURM_NTASKS_PER_NODE"] == "unset"


def test_without_a_node_address_the_rendezvous_is_rank_0s_node_name(tmp_path: Path) -> None:
    said = _run_layout(tmp_path, multinode_spec(node_by_rank=(0, 1, 1)), "true")

    assert said["hosts"] == "mrl-node1\nmrl-node2\nmrl-node2\n"
    assert said["MASTER_ADDR"] == "mrl-node1"


def test_a_one_node_pool_meets_on_the_first_node(tmp_path: Path) -> None:
    said = _run_layout(tmp_path, spec(), 'echo "addr-of-${4}"')

    assert said["SLURM_HOSTFILE"] == "" and said["hosts"] == ""
    assert said["MASTER_ADDR"] == "addr-of-mrl-node1"
    assert said["SLURM_NTASKS_PER_NODE"] == "2"  # left as the allocation set it


# --- srun's last words ----------------------------------------------------------------------
POOL = ["llama", "qwen", "gpt2"]


def test_the_killed_worker_is_named_with_its_policy_rank_and_node() -> None:
    log = "\n".join(
        [
            "[job] run 3 starting on vm",
            "srun: error: mrl-node2: task 1: Killed",
            "srun: error: vm: task 0: Terminated",
            "srun: error: vm: task 2: Terminated",
            "srun: Force Terminated StepId=59.0",
        ]
    )

    assert failed_workers(log, POOL) == [
        "worker of policy 'qwen' (rank 1) on node mrl-node2: Killed"
    ]


def test_a_task_range_names_every_worker_in_it() -> None:
    log = "srun: error: n1: tasks 0-1: Exited with exit code 1\nsrun: error: n2: task 2: Killed\n"

    assert failed_workers(log, POOL) == [
        "worker of policy 'llama' (rank 0) on node n1: Exited with exit code 1",
        "worker of policy 'qwen' (rank 1) on node n1: Exited with exit code 1",
        "worker of policy 'gpt2' (rank 2) on node n2: Killed",
    ]


def test_a_task_list_with_commas_is_read_too() -> None:
    log = "  srun: error: n1: tasks 0,2: Exited with exit code 3  "

    assert failed_workers(log, POOL) == [
        "worker of policy 'llama' (rank 0) on node n1: Exited with exit code 3",
        "worker of policy 'gpt2' (rank 2) on node n1: Exited with exit code 3",
    ]


def test_workers_slurm_terminated_are_no_cause() -> None:
    # What a time limit or a cancel leaves: Slurm stopped every task; the job's own
    # reason ("the job hit its time limit") says why, no worker is to blame.
    log = "srun: error: vm: task 0: Terminated\nsrun: error: node2: task 1: Terminated\n"

    assert failed_workers(log, POOL) == []


def test_a_rank_outside_the_pool_is_named_by_rank() -> None:
    assert failed_workers("srun: error: n9: task 5: Killed", POOL) == [
        "worker of rank 5 (not in the pool) on node n9: Killed"
    ]


def test_no_srun_failure_no_workers() -> None:
    log = "\n".join(
        [
            "[job] trainer exited with 1",
            "slurmstepd-vm: error: *** STEP 59.0 ON vm CANCELLED ***",
            "error: mrl-node2: task 1: Killed",  # not srun's
        ]
    )

    assert failed_workers(log, POOL) == []
    assert failed_workers("", POOL) == []


# --- the run: its job spec, its workers' nodes, its failure ------------------------------
@pytest.fixture
def partitions(settings: Any) -> dict[str, dict[str, Any]]:
    settings.PARTITIONS = {
        **settings.PARTITIONS,
        "multinode": {"nodes": 2, "gpus_per_node": 0, "cpus_per_node": 2, "mem_gb_per_node": 8},
    }
    return settings.PARTITIONS


@pytest.fixture
def run_on(make_experiment: Callable[..., Experiment]) -> Callable[..., Run]:
    def make(backend: str = "slurm", plan: PlacementPlan | None = TWO_NODE_PLAN) -> Run:
        experiment = make_experiment(seeds=(0,))
        experiment.resources = {"backend": backend, "partition": "multinode", "mem_gb": 8}
        if plan is not None:
            experiment.resources["placement"] = placement_json(plan)
        experiment.save()
        run = services.runs_create(experiment, state=Run.State.QUEUED)[0]
        run.backend = backend
        return run

    return make


@pytest.mark.django_db
def test_a_slurm_run_of_a_two_node_plan_places_its_ranks(
    partitions: Any, run_on: Callable[..., Run], tmp_path: Path
) -> None:
    job = job_spec(run_on("slurm"))

    assert (job.nodes, job.node_by_rank, job.tasks_per_node) == (2, (0, 1, 1), 2)
    assert job.partition == "multinode"
    script = render_script(job, slurm=True)
    assert "node_by_rank=(0 1 1)" in script.splitlines()
    assert "#SBATCH --ntasks-per-node=2" in script.splitlines()
    path = tmp_path / "run.sbatch"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)


@pytest.mark.django_db
@pytest.mark.parametrize("node", ["1", 1.0, "1; id"])
def test_a_stored_plan_with_a_bad_node_fails_the_spec_naming_the_field(
    partitions: Any, run_on: Callable[..., Run], node: object
) -> None:
    run = run_on("slurm")
    run.experiment.resources["placement"]["policies"][2]["node"] = node
    with pytest.raises(JobSpecError) as error:
        job_spec(run)
    assert error.value.field == "node_by_rank"


@pytest.mark.django_db
def test_a_local_run_of_a_two_node_plan_runs_on_one_machine(
    partitions: Any, run_on: Callable[..., Run]
) -> None:
    job = job_spec(run_on("local"))

    assert (job.nodes, job.node_by_rank, job.tasks_per_node) == (1, (), 3)
    assert "node_by_rank" not in render_script(job, slurm=False)


@pytest.mark.django_db
def test_worker_nodes_reads_the_records_in_the_run_directory(
    backend: FakeBackend, partitions: Any, run_on: Callable[..., Run]
) -> None:
    run = run_on("slurm")
    assert worker_nodes(run) == {}
    run_dir = job_spec(run).run_dir
    write_worker_record(run_dir, worker_record("qwen", 1, "cpu", {"SLURMD_NODENAME": "vm"}))
    write_worker_record(run_dir, worker_record("gpt2", 2, "cpu", {"SLURMD_NODENAME": "node2"}))

    assert worker_nodes(run) == {"qwen": "vm", "gpt2": "node2"}


@pytest.fixture
def submitted_two_node_run(
    backend: FakeBackend, partitions: Any, run_on: Callable[..., Run]
) -> Run:
    run = run_on("slurm")
    assert submit(run.pk) == "submitted 101"
    return Run.objects.get(pk=run.pk)


@pytest.mark.django_db
def test_the_sync_records_where_each_worker_runs(
    backend: FakeBackend, submitted_two_node_run: Run
) -> None:
    run = submitted_two_node_run
    run_dir = job_spec(run).run_dir
    for rank, (policy, node) in enumerate([("llama", "vm"), ("qwen", "vm"), ("gpt2", "node2")]):
        write_worker_record(run_dir, worker_record(policy, rank, "cpu", {"SLURMD_NODENAME": node}))
    backend.states["101"] = JobStatus("running", node="vm,node2")

    sync()

    run = Run.objects.get(pk=run.pk)
    assert run.state == "running"
    assert run.worker_nodes == {"llama": "vm", "qwen": "vm", "gpt2": "node2"}
    assert run.worker_nodes_text == "llama on vm, qwen on vm, gpt2 on node2"


@pytest.mark.django_db
def test_a_resumed_worker_on_another_node_updates_the_run(
    backend: FakeBackend, submitted_two_node_run: Run
) -> None:
    run = submitted_two_node_run
    run_dir = job_spec(run).run_dir
    write_worker_record(run_dir, worker_record("gpt2", 2, "cpu", {"SLURMD_NODENAME": "node2"}))
    backend.states["101"] = JobStatus("running")
    sync()
    write_worker_record(run_dir, worker_record("gpt2", 2, "cpu", {"SLURMD_NODENAME": "node3"}))

    assert status_apply(Run.objects.get(pk=run.pk), JobStatus("running")) is False

    assert Run.objects.get(pk=run.pk).worker_nodes == {"gpt2": "node3"}


@pytest.mark.django_db
def test_a_failed_job_names_the_lost_worker_first(
    backend: FakeBackend, submitted_two_node_run: Run
) -> None:
    run = submitted_two_node_run
    job = job_spec(run)
    write_worker_record(job.run_dir, worker_record("qwen", 1, "cpu", {"SLURMD_NODENAME": "node2"}))
    job.log_path.write_text(
        "\n".join(
            [
                "[job] run 1 starting on vm",
                "RuntimeError: Connection closed by peer",
                "srun: error: node2: task 1: Killed",
                "srun: error: vm: task 0: Terminated",
                "srun: error: node2: task 2: Terminated",
                "",
            ]
        )
    )
    backend.states["101"] = JobStatus("failed", 137, "vm", "the job failed (exit code 137)")

    assert sync() == {"failed": 1}

    run = Run.objects.get(pk=run.pk)
    assert (run.state, run.exit_code) == ("failed", 137)
    assert run.failure_reason.startswith(
        "worker of policy 'qwen' (rank 1) on node node2: Killed (the job failed (exit code 137))"
    )
    assert "RuntimeError: Connection closed by peer" in run.failure_reason
    assert "Terminated" not in run.failure_reason.splitlines()[0]
    assert run.worker_nodes == {"qwen": "node2"}


@pytest.mark.django_db
def test_a_failed_job_without_srun_failures_keeps_the_backends_reason(
    backend: FakeBackend, submitted_two_node_run: Run
) -> None:
    run = submitted_two_node_run
    backend.states["101"] = JobStatus("failed", 1, "vm", "the job failed (exit code 1)")

    sync()

    run = Run.objects.get(pk=run.pk)
    assert run.failure_reason.startswith("the job failed (exit code 1)")
    assert run.worker_nodes == {}
