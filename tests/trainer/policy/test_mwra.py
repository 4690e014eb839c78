"""MWRA (SPEC 4.6): placement plans checked against hand-computed ones, plus invariants."""

from __future__ import annotations

import ast
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.mwra import PlacementError, PlacementPlan, PolicyDemand, plan_placement

REPO = Path(__file__).resolve().parents[3]
B = 1_000_000_000


def _devices(plan: PlacementPlan) -> dict[str, tuple[int | None, tuple[int, ...], float | None]]:
    return {p.name: (p.node, p.devices, p.memory_fraction) for p in plan.policies}


# --- hand-computed plans -------------------------------------------------------------------
def test_without_gpus_every_worker_runs_on_the_cpu() -> None:
    plan = plan_placement([PolicyDemand("a", 7 * B), PolicyDemand("b", B)], gpus=0)

    assert plan.device == "cpu" and plan.mode == "cpu"
    assert _devices(plan) == {"a": (None, (), None), "b": (None, (), None)}
    assert [p.env() for p in plan.policies] == [{"CUDA_VISIBLE_DEVICES": ""}] * 2
    assert plan.slurm.gres is None
    slurm = plan.slurm
    assert (slurm.nodes, slurm.ntasks, slurm.cpus_per_task, slurm.mem_gb) == (1, 2, 1, None)


def test_devices_follow_parameter_counts_with_at_least_one_each() -> None:
    # Ideal split of 8 GPUs for 7B/1B/1B is 5.6/0.7/0.7; D'Hondt gives 6/1/1.
    plan = plan_placement(
        [PolicyDemand("big", 7 * B), PolicyDemand("s1", B), PolicyDemand("s2", B)],
        gpus=8,
        gpus_per_node=8,
    )

    assert _devices(plan) == {
        "big": (0, (0, 1, 2, 3, 4, 5), 1.0),
        "s1": (0, (6,), 1.0),
        "s2": (0, (7,), 1.0),
    }
    assert plan.policy("big").cuda_visible_devices == "0,1,2,3,4,5"
    assert plan.mode == "exclusive"
    slurm = plan.slurm
    assert (slurm.nodes, slurm.ntasks, slurm.gres, slurm.cpus_per_task) == (1, 3, "gpu:8", 1)


def test_a_spare_device_of_equal_policies_goes_to_the_first() -> None:
    plan = plan_placement([PolicyDemand(n, 5) for n in "abc"], gpus=4)

    assert _devices(plan) == {"a": (0, (0, 1), 1.0), "b": (0, (2,), 1.0), "c": (0, (3,), 1.0)}


def test_policies_spread_over_nodes_and_never_span_one() -> None:
    # 8 GPUs on nodes of 4: two nodes. a (3) and b (3) open one node each; c (2) joins the
    # first of the equally loaded nodes, where a and c split 4 devices 2/2 by D'Hondt.
    plan = plan_placement(
        [PolicyDemand("a", 3), PolicyDemand("b", 3), PolicyDemand("c", 2)],
        gpus=8,
        gpus_per_node=4,
        cpus_per_gpu=4,
        mem_gb=64,
    )

    assert _devices(plan) == {
        "a": (0, (0, 1), 1.0),
        "b": (1, (0, 1, 2, 3), 1.0),
        "c": (0, (2, 3), 1.0),
    }
    assert plan.slurm.tasks_per_node == (2, 1)
    # 4 CPUs per GPU x 4 GPUs per node, split over the 2 workers of the busiest node.
    slurm = plan.slurm
    assert (slurm.nodes, slurm.ntasks, slurm.gres, slurm.cpus_per_task, slurm.mem_gb) == (
        2,
        3,
        "gpu:4",
        8,
        64,
    )


def test_small_policies_share_devices_with_memory_fractions_by_size() -> None:
    # Largest first onto the least-loaded device: a->0, b->1, c->1 (3 < 4), d->0 (4 < 5).
    plan = plan_placement(
        [PolicyDemand("a", 4), PolicyDemand("b", 3), PolicyDemand("c", 2), PolicyDemand("d", 1)],
        gpus=2,
    )

    assert _devices(plan) == {
        "a": (0, (0,), 0.8),
        "b": (0, (1,), 0.6),
        "c": (0, (1,), 0.4),
        "d": (0, (0,), 0.2),
    }
    assert plan.mode == "shared"
    assert plan.policy("c").shared
    assert plan.policy("c").cuda_visible_devices == "1"
    assert plan.notes == ("4 policies share 2 GPU(s): memory fractions follow parameter counts",)


def test_a_big_policy_keeps_its_device_while_small_ones_share() -> None:
    plan = plan_placement(
        [PolicyDemand("big", 7), PolicyDemand("s1", 1), PolicyDemand("s2", 1)], gpus=2
    )

    assert _devices(plan) == {"big": (0, (0,), 1.0), "s1": (0, (1,), 0.5), "s2": (0, (1,), 0.5)}
    assert plan.mode == "mixed"


def test_fractions_are_rounded_down_so_a_device_never_exceeds_one() -> None:
    plan = plan_placement([PolicyDemand(n, 1) for n in "abc"], gpus=1)

    assert [p.memory_fraction for p in plan.policies] == [0.3333] * 3
    assert plan.device_loads() == {(0, 0): pytest.approx(0.9999)}


def test_explicit_device_shares_are_honoured_and_the_rest_is_mwras() -> None:
    plan = plan_placement(
        [
            PolicyDemand("two", 1, device_share=2),
            PolicyDemand("half-a", 1, device_share=0.5),
            PolicyDemand("half-b", 1, device_share=0.5),
            PolicyDemand("auto", 1),
        ],
        gpus=4,
    )

    assert _devices(plan) == {
        "two": (0, (0, 1), 1.0),
        "half-a": (0, (2,), 0.5),
        "half-b": (0, (2,), 0.5),
        "auto": (0, (3,), 1.0),
    }


def test_the_plan_round_trips_through_json() -> None:
    plan = plan_placement(
        [PolicyDemand("a", 3), PolicyDemand("b", 1), PolicyDemand("c", 1)],
        gpus=2,
        mem_gb=32,
    )
    data = json.loads(json.dumps(plan.to_dict()))

    assert PlacementPlan.from_dict(data) == plan
    assert data["policies"][1] == {
        "name": "b",
        "parameter_count": 1,
        "node": 0,
        "devices": [1],
        "memory_fraction": 0.5,
        "shared": True,
        "cuda_visible_devices": "1",
    }
    assert data["slurm"]["gres"] == "gpu:2"
    assert data["slurm"]["mem_gb"] == 32


# --- CPU pools over several nodes (issue 22) -------------------------------------------------
def _nodes_of(plan: PlacementPlan) -> dict[str, int | None]:
    return {p.name: p.node for p in plan.policies}


def test_cpu_policies_go_largest_first_to_the_lightest_node() -> None:
    # a (5) opens node 0; b (3) goes to the empty node 1; c (3) to node 1 (3 < 5);
    # d (2) to node 0 (5 < 6). Pool order is kept in the plan.
    policies = [
        PolicyDemand("d", 2),
        PolicyDemand("c", 3),
        PolicyDemand("a", 5),
        PolicyDemand("b", 3),
    ]
    plan = plan_placement(policies, gpus=0, nodes=2)

    assert [p.name for p in plan.policies] == ["d", "c", "a", "b"]
    assert _nodes_of(plan) == {"a": 0, "b": 1, "c": 1, "d": 0}
    assert plan.device == "cpu" and plan.mode == "cpu"
    assert all(p.devices == () and p.memory_fraction is None for p in plan.policies)
    assert (plan.slurm.nodes, plan.slurm.ntasks, plan.slurm.tasks_per_node) == (2, 4, (2, 2))
    assert plan.slurm.gres is None
    assert "the workers are spread over 2 nodes by parameter count" in plan.notes


def test_equal_policies_fill_nodes_in_pool_order_and_ties_go_to_the_lowest_node() -> None:
    # All loads equal at each tie: x -> 0, y -> 1, then z to the lowest of the two equal
    # nodes, 0.
    plan = plan_placement([PolicyDemand(n, 1) for n in "xyz"], gpus=0, nodes=2)

    assert _nodes_of(plan) == {"x": 0, "y": 1, "z": 0}
    assert plan.slurm.tasks_per_node == (2, 1)


def test_among_equal_sizes_the_earlier_policy_is_placed_first() -> None:
    # q (5) takes node 0; p and r (1 each) then go in pool order: p to the empty node 1,
    # r to node 1 as well (1 < 5).
    plan = plan_placement(
        [PolicyDemand("p", 1), PolicyDemand("q", 5), PolicyDemand("r", 1)], gpus=0, nodes=2
    )

    assert _nodes_of(plan) == {"p": 1, "q": 0, "r": 1}
    assert plan.slurm.tasks_per_node == (1, 2)


def test_every_node_gets_a_worker_even_beside_a_huge_policy() -> None:
    plan = plan_placement(
        [PolicyDemand("huge", 100 * B), PolicyDemand("s1", 1), PolicyDemand("s2", 1)],
        gpus=0,
        nodes=3,
    )

    assert _nodes_of(plan) == {"huge": 0, "s1": 1, "s2": 2}
    assert plan.slurm.tasks_per_node == (1, 1, 1)


def test_a_one_node_cpu_plan_has_no_node_indices_and_one_task_count() -> None:
    for nodes in (None, 1):
        plan = plan_placement([PolicyDemand("a", 2), PolicyDemand("b", 1)], gpus=0, nodes=nodes)

        assert _nodes_of(plan) == {"a": None, "b": None}
        assert (plan.slurm.nodes, plan.slurm.tasks_per_node) == (1, (2,))
        assert not any("spread over" in note for note in plan.notes)


def test_cpus_per_task_of_a_multinode_cpu_plan_divide_the_jobs_cpus() -> None:
    plan = plan_placement(
        [PolicyDemand(n, 1) for n in "abcd"], gpus=0, nodes=2, cpus=8, mem_gb=16, max_nodes=2
    )

    assert (plan.slurm.cpus_per_task, plan.slurm.mem_gb) == (2, 16)


def test_a_multinode_cpu_plan_round_trips_through_json() -> None:
    plan = plan_placement(
        [PolicyDemand("a", 5), PolicyDemand("b", 3), PolicyDemand("c", 3)], gpus=0, nodes=2
    )
    data = json.loads(json.dumps(plan.to_dict()))

    assert PlacementPlan.from_dict(data) == plan
    assert [item["node"] for item in data["policies"]] == [0, 1, 1]
    assert data["slurm"]["tasks_per_node"] == [1, 2]
    assert data["slurm"]["nodes"] == 2 and data["slurm"]["gres"] is None


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"nodes": 3}, "3 nodes for 2 policies: a policy never spans nodes, so request at most 2"),
        ({"nodes": 2, "max_nodes": 1}, "more nodes than the partition has: 2 requested, the "),
        ({"nodes": 0}, "nodes must be a whole number >= 1; got 0"),
        ({"nodes": -2}, "nodes must be a whole number >= 1; got -2"),
    ],
)
def test_impossible_cpu_node_counts_are_refused_on_nodes(
    kwargs: dict[str, int], fragment: str
) -> None:
    with pytest.raises(PlacementError) as caught:
        plan_placement([PolicyDemand("a", 1), PolicyDemand("b", 1)], gpus=0, **kwargs)

    assert caught.value.path == "nodes"
    assert fragment in caught.value.message


def test_the_partitions_node_count_is_checked_before_the_pools_size() -> None:
    # 3 nodes for 2 policies on a partition of 2: the partition's limit is the message.
    with pytest.raises(PlacementError) as caught:
        plan_placement([PolicyDemand("a", 1), PolicyDemand("b", 1)], gpus=0, nodes=3, max_nodes=2)

    assert caught.value.path == "nodes"
    assert "request at most 2 or choose another partition" in caught.value.message


# --- impossible requests -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "path", "fragment"),
    [
        ({"gpus": 9, "gpus_per_node": 8}, "gpus", "request 8 or 10"),
        ({"gpus": 16, "gpus_per_node": 8, "max_nodes": 1}, "gpus", "more GPUs than the partition"),
        ({"gpus": 2, "gpus_per_node": 0}, "gpus", "more GPUs than the partition has"),
        ({"gpus": 24, "gpus_per_node": 8}, "gpus", "never spans nodes"),
        ({"gpus": -1}, "gpus", "gpus must be a whole number >= 0"),
    ],
)
def test_impossible_gpu_requests_say_how_to_fix_them(
    kwargs: dict[str, int], path: str, fragment: str
) -> None:
    with pytest.raises(PlacementError) as caught:
        plan_placement([PolicyDemand("a", 1), PolicyDemand("b", 1)], **kwargs)

    assert caught.value.path == path
    assert fragment in str(caught.value)


def test_a_fractional_share_above_one_is_refused() -> None:
    with pytest.raises(PlacementError) as caught:
        plan_placement([PolicyDemand("a", 1), PolicyDemand("b", 1, device_share=1.5)], gpus=4)

    assert caught.value.path == "pool[1].device_share"
    assert "neither a whole number" in caught.value.message


def test_a_share_bigger_than_a_node_is_refused() -> None:
    with pytest.raises(PlacementError) as caught:
        plan_placement(
            [PolicyDemand("a", 1, device_share=6), PolicyDemand("b", 1)], gpus=8, gpus_per_node=4
        )

    assert caught.value.path == "pool[0].device_share"
    assert "never spans nodes" in caught.value.message


def test_explicit_shares_that_leave_gpus_idle_are_refused() -> None:
    with pytest.raises(PlacementError) as caught:
        plan_placement(
            [PolicyDemand("a", 1, device_share=1), PolicyDemand("b", 1, device_share=0.5)],
            gpus=4,
        )

    assert caught.value.path == "gpus"
    assert "use 2 of the 4 GPUs" in caught.value.message


def test_explicit_shares_that_leave_nothing_for_the_rest_are_refused() -> None:
    with pytest.raises(PlacementError) as caught:
        plan_placement([PolicyDemand("a", 1, device_share=2), PolicyDemand("b", 1)], gpus=2)

    assert "no GPU is left for 'b'" in caught.value.message


@pytest.mark.parametrize(
    ("policies", "path"),
    [
        ([], "pool"),
        ([PolicyDemand("a", 1), PolicyDemand("a", 2)], "pool[1].name"),
        ([PolicyDemand("a", 0)], "pool[0].parameter_count"),
        ([PolicyDemand("a", 1, device_share=-1.0)], "pool[0].device_share"),
    ],
)
def test_bad_pools_are_refused(policies: list[PolicyDemand], path: str) -> None:
    with pytest.raises(PlacementError) as caught:
        plan_placement(policies, gpus=1)

    assert caught.value.path == path
    assert isinstance(caught.value, ValueError)


# --- invariants ----------------------------------------------------------------------------
def _check_invariants(plan: PlacementPlan, policies: list[PolicyDemand], gpus: int) -> None:
    assert [p.name for p in plan.policies] == [p.name for p in policies]  # every policy placed
    used: set[tuple[int, int]] = set()
    exclusive: list[tuple[int, int]] = []
    for placement in plan.policies:
        assert len(placement.devices) >= 1
        assert placement.node is not None and 0 <= placement.node < plan.slurm.nodes
        assert all(0 <= d < plan.slurm.gpus_per_node for d in placement.devices)
        assert placement.memory_fraction is not None and 0 < placement.memory_fraction <= 1
        keys = [(placement.node, d) for d in placement.devices]
        used.update(keys)
        if placement.memory_fraction == 1.0:
            exclusive += keys
    assert len(exclusive) == len(set(exclusive))  # no device given to two exclusive owners
    assert all(load <= 1.0 + 1e-9 for load in plan.device_loads().values())
    assert len(used) == gpus == plan.slurm.gpus  # total devices = request
    assert sum(plan.slurm.tasks_per_node) == plan.slurm.ntasks == len(policies)


def test_default_plans_keep_their_invariants() -> None:
    rng = random.Random(46)
    for _ in range(400):
        size = rng.randint(1, 8)
        policies = [PolicyDemand(f"p{i}", rng.choice([1, 3, 7, 70]) * B) for i in range(size)]
        nodes = rng.randint(1, min(size, 3))
        per_node = rng.randint(1, 8)
        gpus = nodes * per_node
        plan = plan_placement(policies, gpus=gpus, gpus_per_node=per_node)
        _check_invariants(plan, policies, gpus)
        if gpus >= size:
            assert plan.mode == "exclusive"
            weights = sorted((p.parameter_count, len(p.devices)) for p in plan.policies)
            if nodes == 1:  # bigger never gets fewer devices than smaller
                counts = [count for _, count in weights]
                assert counts == sorted(counts)


def test_plans_with_explicit_fractions_keep_their_invariants() -> None:
    rng = random.Random(7)
    for _ in range(300):
        size = rng.randint(2, 8)
        policies = [
            PolicyDemand(f"p{i}", rng.randint(1, 10), rng.choice([None, 0.25, 0.5, 0.3]))
            for i in range(size)
        ]
        gpus = rng.randint(1, 6)
        try:
            plan = plan_placement(policies, gpus=gpus)
        except PlacementError as error:
            assert error.path in {"gpus"} or error.path.endswith(".device_share")
            continue
        _check_invariants(plan, policies, gpus)
        for placement, policy in zip(plan.policies, policies, strict=True):
            if policy.device_share is not None:
                assert placement.memory_fraction == policy.device_share


def test_mwra_imports_without_torch() -> None:
    code = "import sys, trainer.mwra; assert 'torch' not in sys.modules, 'mwra imported torch'"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_the_planner_reads_no_files() -> None:
    # Reading the models' files to count parameters is trainer.mwra_counting's; the
    # planner is a pure function of its arguments.
    tree = ast.parse((REPO / "trainer" / "mwra.py").read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not imported & {"json", "os", "pathlib", "trainer.zoo", "trainer.mwra_counting"}
