"""An MWRA plan's Slurm request as sbatch arguments (scheduler.jobs.sbatch_args), and the
plan as an experiment stores it (scheduler.jobs.placement_json), hand-computed."""

from __future__ import annotations

import json

from scheduler.jobs import placement_json, sbatch_args
from trainer.mwra import PlacementPlan, PolicyDemand, SlurmRequest, plan_placement

B = 1_000_000_000


def test_a_cpu_plan_asks_for_no_gres_and_no_memory() -> None:
    plan = plan_placement([PolicyDemand("a", 7 * B), PolicyDemand("b", B)], gpus=0)

    assert sbatch_args(plan.slurm) == ["--nodes=1", "--ntasks=2", "--cpus-per-task=1"]


def test_one_node_of_eight_gpus() -> None:
    plan = plan_placement(
        [PolicyDemand("big", 7 * B), PolicyDemand("s1", B), PolicyDemand("s2", B)],
        gpus=8,
        gpus_per_node=8,
    )

    assert sbatch_args(plan.slurm) == [
        "--nodes=1",
        "--ntasks=3",
        "--gres=gpu:8",
        "--cpus-per-task=1",
    ]


def test_two_nodes_with_cpus_per_gpu_and_memory() -> None:
    # 4 CPUs per GPU x 4 GPUs per node, split over the 2 workers of the busiest node.
    plan = plan_placement(
        [PolicyDemand("a", 3), PolicyDemand("b", 3), PolicyDemand("c", 2)],
        gpus=8,
        gpus_per_node=4,
        cpus_per_gpu=4,
        mem_gb=64,
    )

    # Every node has room for the busiest node's 2 tasks; the step places the 3 ranks.
    assert sbatch_args(plan.slurm) == [
        "--nodes=2",
        "--ntasks=4",
        "--ntasks-per-node=2",
        "--gres=gpu:4",
        "--cpus-per-task=8",
        "--mem=64G",
    ]


def test_it_reads_the_request_alone() -> None:
    request = SlurmRequest(
        nodes=3, gpus_per_node=2, ntasks=5, tasks_per_node=(2, 2, 1), cpus_per_task=6, mem_gb=0
    )

    assert sbatch_args(request) == [
        "--nodes=3",
        "--ntasks=6",
        "--ntasks-per-node=2",
        "--gres=gpu:2",
        "--cpus-per-task=6",
    ]


def test_the_stored_plan_carries_its_sbatch_arguments_and_reads_back() -> None:
    plan = plan_placement(
        [PolicyDemand("a", 3), PolicyDemand("b", 1), PolicyDemand("c", 1)],
        gpus=2,
        mem_gb=32,
    )
    stored = json.loads(json.dumps(placement_json(plan)))

    assert stored["slurm"]["sbatch_args"] == [
        "--nodes=1",
        "--ntasks=3",
        "--gres=gpu:2",
        "--cpus-per-task=1",
        "--mem=32G",
    ]
    # The same JSON as before the arguments moved to the scheduler: to_dict, then them.
    assert list(stored["slurm"]) == [*plan.to_dict()["slurm"], "sbatch_args"]
    assert {k: v for k, v in stored.items() if k != "slurm"} == {
        k: v for k, v in plan.to_dict().items() if k != "slurm"
    }
    assert PlacementPlan.from_dict(stored) == plan
