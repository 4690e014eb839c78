"""MWRA, Multi-Worker Resource Allocation (SPEC 4.6): which devices each policy worker gets.

A pure function of the pool and the job's GPUs, so the experiment form can show the plan
before launch and the scheduler can turn the same plan into the Slurm request and each
worker's environment::

    plan = plan_placement(
        [PolicyDemand("llama-7b", 7_000_000_000), PolicyDemand("qwen-1b", 1_000_000_000)],
        gpus=4,
        gpus_per_node=8,
    )
    plan.policy("llama-7b").cuda_visible_devices  # "0,1,2"
    plan.slurm.gres  # "gpu:4"
    plan.to_dict()  # JSON; PlacementPlan.from_dict reads it

The rules, in order:

1. No GPUs: every worker runs on the CPU (``CUDA_VISIBLE_DEVICES=""``), on one node unless
   ``nodes`` asks for more; then the policies go largest first to the node with the
   fewest parameters so far (every node gets at least one).
2. The GPUs are spread evenly over ``ceil(gpus / gpus_per_node)`` nodes (Slurm's
   ``--gres=gpu:N`` is per node). A policy never spans nodes.
3. A policy with an explicit ``device_share`` gets exactly that: a whole number of
   devices of its own (``device_share >= 1``), or that fraction of one device's memory
   (``device_share < 1``; fractions are packed first-fit decreasing onto shared devices).
4. The other policies share the remaining devices by parameter count. With at least one
   device each, every policy gets devices of its own, proportional to its parameters
   (D'Hondt: one device each, then each further device to the policy with the most
   parameters per device it has; across nodes, policies go largest first to the least
   loaded node). With fewer devices than policies, several policies share a device,
   largest first onto the least-loaded device, each with a memory fraction proportional
   to its parameters.

Impossible requests raise :class:`PlacementError`, whose ``path`` names the input at fault
(``"gpus"``, ``"pool[2].device_share"``...) and whose message says how to fix it.

The parameter counts come from :mod:`trainer.mwra_counting` (which reads the models'
files); turning the request into ``sbatch`` arguments is the scheduler's
(:func:`scheduler.jobs.sbatch_args`). This module reads nothing and imports no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

FRACTION_DECIMALS = 4
"""Memory fractions are rounded down to this many decimals, so a device's sum stays <= 1."""

_EPS = 1e-9


class PlacementError(ValueError):
    """A placement request that cannot be satisfied; the message says how to fix it.

    ``path`` names the input at fault, in the run config's terms: ``"gpus"``,
    ``"gpus_per_node"``, ``"nodes"``, ``"pool"`` or ``"pool[i].<field>"``.
    """

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.message = message


@dataclass(frozen=True)
class PolicyDemand:
    """One policy as MWRA sees it: a name, a size and an optional explicit device share."""

    name: str
    parameter_count: int
    device_share: float | None = None


@dataclass(frozen=True)
class PolicyPlacement:
    """Where one policy's worker runs.

    ``node`` is the node's index within the job's allocation (the order of ``scontrol show
    hostnames $SLURM_JOB_NODELIST``), None for a one-node CPU job; ``devices`` are local
    device indices on that node; ``memory_fraction`` is
    the share of each of those devices' memory the worker may use (1.0 when it has them to
    itself, None on the CPU).
    """

    name: str
    parameter_count: int
    node: int | None
    devices: tuple[int, ...]
    memory_fraction: float | None

    @property
    def cuda_visible_devices(self) -> str:
        """The worker's ``CUDA_VISIBLE_DEVICES``: ``"0,1"``; ``""`` (no GPU) on the CPU."""
        return ",".join(str(index) for index in self.devices)

    @property
    def shared(self) -> bool:
        return self.memory_fraction is not None and self.memory_fraction < 1.0

    def env(self) -> dict[str, str]:
        """Environment variables the scheduler sets for this worker."""
        return {"CUDA_VISIBLE_DEVICES": self.cuda_visible_devices}

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "parameter_count": self.parameter_count,
            "node": self.node,
            "devices": list(self.devices),
            "memory_fraction": self.memory_fraction,
            "shared": self.shared,
            "cuda_visible_devices": self.cuda_visible_devices,
        }


@dataclass(frozen=True)
class SlurmRequest:
    """The job's resource request: one task (worker) per policy.

    ``tasks_per_node[k]`` is how many workers the plan puts on node ``k``; ``mem_gb`` and
    the CPUs are per node, as Slurm's ``--mem`` is.
    """

    nodes: int
    gpus_per_node: int
    ntasks: int
    tasks_per_node: tuple[int, ...]
    cpus_per_task: int
    mem_gb: int | None = None

    @property
    def gres(self) -> str | None:
        """``"gpu:N"`` for ``--gres``; None for a CPU-only job."""
        return f"gpu:{self.gpus_per_node}" if self.gpus_per_node else None

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "gres": self.gres,
            "ntasks": self.ntasks,
            "tasks_per_node": list(self.tasks_per_node),
            "cpus_per_task": self.cpus_per_task,
            "mem_gb": self.mem_gb,
        }


@dataclass(frozen=True)
class PlacementPlan:
    """The placement of a whole pool, and the Slurm request that provides it.

    ``mode`` is ``"cpu"``, ``"exclusive"`` (every worker has its devices to itself),
    ``"shared"`` (every device is shared) or ``"mixed"``.
    """

    device: str
    mode: str
    gpus: int
    policies: tuple[PolicyPlacement, ...]
    slurm: SlurmRequest
    notes: tuple[str, ...] = field(default=())

    def policy(self, name: str) -> PolicyPlacement:
        for placement in self.policies:
            if placement.name == name:
                return placement
        raise KeyError(name)

    def device_loads(self) -> dict[tuple[int, int], float]:
        """Memory fraction in use per ``(node, device)``; each is at most 1."""
        loads: dict[tuple[int, int], float] = {}
        for placement in self.policies:
            if placement.node is None or placement.memory_fraction is None:
                continue
            for index in placement.devices:
                key = (placement.node, index)
                loads[key] = loads.get(key, 0.0) + placement.memory_fraction
        return loads

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON (:meth:`from_dict` reads it back); an experiment stores it with
        the request's sbatch arguments added (:func:`scheduler.jobs.placement_json`)."""
        return {
            "device": self.device,
            "mode": self.mode,
            "gpus": self.gpus,
            "policies": [placement.to_dict() for placement in self.policies],
            "slurm": self.slurm.to_dict(),
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlacementPlan:
        slurm = data["slurm"]
        return cls(
            device=data["device"],
            mode=data["mode"],
            gpus=int(data["gpus"]),
            policies=tuple(
                PolicyPlacement(
                    name=item["name"],
                    parameter_count=int(item["parameter_count"]),
                    node=item["node"],
                    devices=tuple(item["devices"]),
                    memory_fraction=item["memory_fraction"],
                )
                for item in data["policies"]
            ),
            slurm=SlurmRequest(
                nodes=int(slurm["nodes"]),
                gpus_per_node=int(slurm["gpus_per_node"]),
                ntasks=int(slurm["ntasks"]),
                tasks_per_node=tuple(slurm["tasks_per_node"]),
                cpus_per_task=int(slurm["cpus_per_task"]),
                mem_gb=slurm.get("mem_gb"),
            ),
            notes=tuple(data.get("notes", ())),
        )


# --- the planner -------------------------------------------------------------------------
def plan_placement(
    policies: Sequence[PolicyDemand],
    gpus: int,
    gpus_per_node: int | None = None,
    *,
    nodes: int | None = None,
    max_nodes: int | None = None,
    cpus_per_gpu: int | None = None,
    cpus: int | None = None,
    mem_gb: int | None = None,
) -> PlacementPlan:
    """Place ``policies`` (pool order) on ``gpus`` GPUs of nodes with ``gpus_per_node`` each.

    ``gpus_per_node`` defaults to ``gpus`` (one node); ``nodes`` defaults to the fewest
    that hold ``gpus`` (one for a CPU job); ``max_nodes`` is the partition's node count.
    ``cpus_per_gpu`` or ``cpus`` (for the whole job) and ``mem_gb`` (per node) only shape
    the Slurm request. Raises :class:`PlacementError` for an impossible request.
    """
    _check_policies(policies)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise PlacementError(f"gpus must be a whole number >= 0; got {gpus!r}", path="gpus")
    if gpus == 0:
        return _cpu_plan(policies, cpus=cpus, mem_gb=mem_gb, nodes=nodes, max_nodes=max_nodes)

    node_count, per_node = _node_layout(gpus, gpus_per_node, nodes, max_nodes)
    if len(policies) < node_count:
        raise PlacementError(
            f"{gpus} GPUs take {node_count} nodes of {per_node}, but a policy never spans "
            f"nodes, so {len(policies)} policies can use at most {len(policies)} nodes; "
            f"request at most {len(policies) * per_node} GPUs or add policies",
            path="gpus",
        )
    placer = _Placer(node_count, per_node)
    placer.place_explicit(policies)
    placer.place_defaults(policies)
    placements = tuple(placer.placements[index] for index in range(len(policies)))

    tasks_per_node = tuple(
        sum(1 for placement in placements if placement.node == node) for node in range(node_count)
    )
    if cpus_per_gpu:
        node_cpus = cpus_per_gpu * per_node
    elif cpus:
        node_cpus = cpus // node_count
    else:
        node_cpus = max(tasks_per_node)
    slurm = SlurmRequest(
        nodes=node_count,
        gpus_per_node=per_node,
        ntasks=len(policies),
        tasks_per_node=tasks_per_node,
        cpus_per_task=max(1, node_cpus // max(max(tasks_per_node), 1)),
        mem_gb=mem_gb,
    )
    fractions = [placement.memory_fraction for placement in placements]
    if all(fraction == 1.0 for fraction in fractions):
        mode = "exclusive"
    elif all(fraction is not None and fraction < 1.0 for fraction in fractions):
        mode = "shared"
    else:
        mode = "mixed"
    return PlacementPlan(
        device="cuda",
        mode=mode,
        gpus=gpus,
        policies=placements,
        slurm=slurm,
        notes=tuple(placer.notes),
    )


def _check_policies(policies: Sequence[PolicyDemand]) -> None:
    if not policies:
        raise PlacementError("the pool is empty: add at least one policy", path="pool")
    seen: set[str] = set()
    for index, policy in enumerate(policies):
        if policy.name in seen:
            raise PlacementError(
                f"duplicate policy name {policy.name!r}; give each policy its own name",
                path=f"pool[{index}].name",
            )
        seen.add(policy.name)
        count = policy.parameter_count
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise PlacementError(
                f"parameter_count of {policy.name!r} must be a whole number >= 1; got {count!r}",
                path=f"pool[{index}].parameter_count",
            )
        share = policy.device_share
        if share is not None and not (math.isfinite(share) and share > 0):
            raise PlacementError(
                f"device_share of {policy.name!r} must be > 0 (or empty to let MWRA decide); "
                f"got {share!r}",
                path=f"pool[{index}].device_share",
            )


def _cpu_plan(
    policies: Sequence[PolicyDemand],
    *,
    cpus: int | None,
    mem_gb: int | None,
    nodes: int | None = None,
    max_nodes: int | None = None,
) -> PlacementPlan:
    node_count = 1 if nodes is None else nodes
    if isinstance(node_count, bool) or not isinstance(node_count, int) or node_count < 1:
        raise PlacementError(f"nodes must be a whole number >= 1; got {nodes!r}", path="nodes")
    if max_nodes is not None and node_count > max_nodes:
        raise PlacementError(
            f"more nodes than the partition has: {node_count} requested, the partition has "
            f"{max_nodes}; request at most {max_nodes} or choose another partition",
            path="nodes",
        )
    if node_count > len(policies):
        raise PlacementError(
            f"{node_count} nodes for {len(policies)} policies: a policy never spans nodes, so "
            f"request at most {len(policies)} node(s) or add policies",
            path="nodes",
        )
    nodes_of = _spread_over_nodes(policies, node_count) if node_count > 1 else None
    placements = tuple(
        PolicyPlacement(
            policy.name,
            policy.parameter_count,
            None if nodes_of is None else nodes_of[index],
            (),
            None,
        )
        for index, policy in enumerate(policies)
    )
    notes = ["no GPUs requested: every worker runs on the CPU"]
    if node_count > 1:
        notes.append(f"the workers are spread over {node_count} nodes by parameter count")
    if any(policy.device_share is not None for policy in policies):
        notes.append("device_share is ignored on the CPU")
    tasks_per_node = tuple(
        sum(1 for placement in placements if (placement.node or 0) == node)
        for node in range(node_count)
    )
    slurm = SlurmRequest(
        nodes=node_count,
        gpus_per_node=0,
        ntasks=len(policies),
        tasks_per_node=tasks_per_node,
        cpus_per_task=max(1, (cpus or len(policies)) // len(policies)),
        mem_gb=mem_gb,
    )
    return PlacementPlan("cpu", "cpu", 0, placements, slurm, tuple(notes))


def _spread_over_nodes(policies: Sequence[PolicyDemand], node_count: int) -> list[int]:
    """Each policy's node: largest first (pool order on ties) to the node holding the
    fewest parameters so far (the lowest index on ties), so every node gets one."""
    load = [0] * node_count
    nodes_of = [0] * len(policies)
    order = sorted(range(len(policies)), key=lambda i: (-policies[i].parameter_count, i))
    for index in order:
        node = min(range(node_count), key=lambda k: (load[k], k))
        load[node] += policies[index].parameter_count
        nodes_of[index] = node
    return nodes_of


def _node_layout(
    gpus: int, gpus_per_node: int | None, nodes: int | None, max_nodes: int | None
) -> tuple[int, int]:
    """``(nodes, GPUs per node)`` of the job: the GPUs spread evenly over its nodes."""
    if gpus_per_node is None:
        gpus_per_node = gpus if nodes is None else math.ceil(gpus / nodes)
    if gpus_per_node < 1:
        raise PlacementError(
            f"more GPUs than the partition has: its nodes have no GPUs, so request 0 GPUs "
            f"(workers run on the CPU) or choose a GPU partition; got {gpus}",
            path="gpus",
        )
    if nodes is None:
        nodes = math.ceil(gpus / gpus_per_node)
    if nodes < 1:
        raise PlacementError(f"nodes must be >= 1; got {nodes}", path="nodes")
    if max_nodes is not None and nodes > max_nodes:
        raise PlacementError(
            f"more GPUs than the partition has: {gpus} GPUs need {nodes} nodes of "
            f"{gpus_per_node}, and the partition has {max_nodes} "
            f"({max_nodes * gpus_per_node} GPUs); request at most {max_nodes * gpus_per_node}",
            path="gpus",
        )
    if gpus % nodes or gpus // nodes > gpus_per_node:
        lower = nodes * min(gpus // nodes, gpus_per_node)
        upper = nodes * math.ceil(gpus / nodes)
        options = [str(n) for n in (lower, upper) if 0 < n <= nodes * gpus_per_node]
        fix = " or ".join(dict.fromkeys(options)) or str(nodes)
        raise PlacementError(
            f"{gpus} GPUs cannot be spread evenly over {nodes} node(s) of {gpus_per_node} "
            f"GPUs (Slurm's --gres=gpu:N is per node); request {fix}",
            path="gpus",
        )
    return nodes, gpus // nodes


class _Placer:
    """The mutable state of one planning: free devices per node, placements so far."""

    def __init__(self, nodes: int, per_node: int) -> None:
        self.per_node = per_node
        self.next_free = [0] * nodes
        self.placements: dict[int, PolicyPlacement] = {}
        self.notes: list[str] = []

    def free(self, node: int) -> int:
        return self.per_node - self.next_free[node]

    def take(self, node: int, count: int) -> tuple[int, ...]:
        start = self.next_free[node]
        self.next_free[node] += count
        return tuple(range(start, start + count))

    def place_explicit(self, policies: Sequence[PolicyDemand]) -> None:
        """Policies with a ``device_share``: whole devices, or packed fractions of one."""
        whole: list[tuple[int, int]] = []  # (devices, pool index)
        fractional: list[tuple[float, int]] = []
        for index, policy in enumerate(policies):
            share = policy.device_share
            if share is None:
                continue
            if share >= 1.0 - _EPS:
                if abs(share - round(share)) > _EPS:
                    raise PlacementError(
                        f"device_share {share:g} of {policy.name!r} is neither a whole number "
                        "of GPUs nor a fraction of one: use e.g. 1 or 2, or a value below 1 to "
                        "share a device",
                        path=f"pool[{index}].device_share",
                    )
                count = round(share)
                if count > self.per_node:
                    raise PlacementError(
                        f"device_share {count} of {policy.name!r} is more than a node's "
                        f"{self.per_node} GPUs in this job, and a policy never spans nodes; "
                        f"use at most {self.per_node} or request more GPUs per node",
                        path=f"pool[{index}].device_share",
                    )
                whole.append((count, index))
            else:
                fractional.append((share, index))

        # Shared devices for the fractions: first-fit decreasing, capacity 1.
        bins: list[list[tuple[float, int]]] = []
        for share, index in sorted(fractional, key=lambda item: (-item[0], item[1])):
            for members in bins:
                if sum(member[0] for member in members) + share <= 1.0 + _EPS:
                    members.append((share, index))
                    break
            else:
                bins.append([(share, index)])

        # Units (a whole-device policy, or one shared device) go largest first to the
        # node with the most free devices.
        units: list[tuple[int, int, list[tuple[float, int]]]] = [
            (count, index, []) for count, index in whole
        ]
        units += [(1, min(member[1] for member in members), members) for members in bins]
        for count, first_index, members in sorted(units, key=lambda unit: (-unit[0], unit[1])):
            node = max(range(len(self.next_free)), key=lambda k: (self.free(k), -k))
            if self.free(node) < count:
                name = policies[first_index].name
                raise PlacementError(
                    f"the device_share values do not fit in {self.gpus_text()}: no node has "
                    f"{count} free GPU(s) left for {name!r}; request more GPUs or lower the "
                    "device_share values",
                    path=f"pool[{first_index}].device_share",
                )
            devices = self.take(node, count)
            if members:
                for share, index in members:
                    policy = policies[index]
                    self.placements[index] = PolicyPlacement(
                        policy.name, policy.parameter_count, node, devices, _round_down(share)
                    )
            else:
                policy = policies[first_index]
                self.placements[first_index] = PolicyPlacement(
                    policy.name, policy.parameter_count, node, devices, 1.0
                )

    def place_defaults(self, policies: Sequence[PolicyDemand]) -> None:
        """The policies without a ``device_share``: by parameter count, on what is left."""
        pending = [index for index, policy in enumerate(policies) if policy.device_share is None]
        left = sum(self.free(node) for node in range(len(self.next_free)))
        if not pending:
            if left:
                used = self.gpus_total() - left
                raise PlacementError(
                    f"the policies' device_share values use {used} of the "
                    f"{self.gpus_text()} requested; request {used} GPU(s), raise a "
                    "device_share, or leave one empty so MWRA gives it the rest",
                    path="gpus",
                )
            return
        names = ", ".join(repr(policies[index].name) for index in pending)
        if not left:
            raise PlacementError(
                f"no GPU is left for {names} after the explicit device_share values; request "
                "more GPUs or give them a device_share too",
                path="gpus",
            )
        if left >= len(pending):
            self._exclusive(policies, pending)
        else:
            self._shared(policies, pending)
            self.notes.append(
                f"{len(pending)} policies share {left} GPU(s): memory fractions follow "
                "parameter counts"
            )

    def _exclusive(self, policies: Sequence[PolicyDemand], pending: list[int]) -> None:
        open_nodes = [node for node in range(len(self.next_free)) if self.free(node) > 0]
        if len(open_nodes) > len(pending):
            raise PlacementError(
                f"free GPUs on {len(open_nodes)} nodes but only {len(pending)} policies to "
                "place there, and a policy never spans nodes; request fewer GPUs or add "
                "policies",
                path="gpus",
            )
        weight = {index: policies[index].parameter_count for index in pending}
        largest_first = sorted(pending, key=lambda index: (-weight[index], index))
        members: dict[int, list[int]] = {node: [] for node in open_nodes}
        # One policy per node first (largest to the roomiest), then the rest to the node
        # with the fewest parameters per free device that still has a device to spare.
        roomiest = sorted(open_nodes, key=lambda node: (-self.free(node), node))
        for node, index in zip(roomiest, largest_first, strict=False):
            members[node].append(index)
        for index in largest_first[len(roomiest) :]:
            candidates = [node for node in open_nodes if len(members[node]) < self.free(node)]
            node = min(
                candidates,
                key=lambda k: (Fraction(sum(weight[i] for i in members[k]), self.free(k)), k),
            )
            members[node].append(index)
        for node in open_nodes:
            group = sorted(members[node])
            counts = _dhondt([weight[index] for index in group], self.free(node))
            for index, count in zip(group, counts, strict=True):
                policy = policies[index]
                self.placements[index] = PolicyPlacement(
                    policy.name, policy.parameter_count, node, self.take(node, count), 1.0
                )

    def _shared(self, policies: Sequence[PolicyDemand], pending: list[int]) -> None:
        devices = [
            (node, index)
            for node in range(len(self.next_free))
            for index in range(self.next_free[node], self.per_node)
        ]
        load = {device: 0 for device in devices}
        members: dict[tuple[int, int], list[int]] = {device: [] for device in devices}
        weight = {index: policies[index].parameter_count for index in pending}
        for index in sorted(pending, key=lambda i: (-weight[i], i)):
            device = min(devices, key=lambda d: (load[d], d))
            load[device] += weight[index]
            members[device].append(index)
        for device in devices:
            node, local = device
            for index in members[device]:
                policy = policies[index]
                fraction = _round_down(weight[index] / load[device])
                self.placements[index] = PolicyPlacement(
                    policy.name, policy.parameter_count, node, (local,), fraction
                )
        for node in range(len(self.next_free)):
            self.next_free[node] = self.per_node

    def gpus_total(self) -> int:
        return self.per_node * len(self.next_free)

    def gpus_text(self) -> str:
        return f"{self.gpus_total()} GPUs"


def _dhondt(weights: Sequence[int], seats: int) -> list[int]:
    """Split ``seats`` (>= len(weights)) by D'Hondt, one seat each to start with.

    Each further seat goes to the largest ``weight / seats so far``; ties to the earlier.
    """
    counts = [1] * len(weights)
    for _ in range(seats - len(weights)):
        best = max(range(len(weights)), key=lambda i: (Fraction(weights[i], counts[i]), -i))
        counts[best] += 1
    return counts


def _round_down(value: float) -> float:
    scale = 10**FRACTION_DECIMALS
    return math.floor(value * scale + _EPS) / scale
