"""The stored MWRA plan and resources of an experiment, as the experiment page shows them.

``Experiment.resources`` keeps the request (``gpus``, ``time_limit``...) and the MWRA
placement as JSON (:func:`scheduler.jobs.placement_json`). The page shows them as
words and a table: "CPU" rather than ``None``, "50 %" rather than ``0.5``, never a Python
dict. A plan stored by an older version (a key missing, a value of another type) shows
what it has and a dash for the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webapp.core.configform import field_label
from webapp.runs.forms import RESOURCE_FIELDS

DASH = "\u2013"  # an en dash, as the other pages show a missing value
MODES = {
    "cpu": "CPU only: every worker runs on the CPU",
    "exclusive": "exclusive: every worker has its GPUs to itself",
    "shared": "shared: the workers share GPUs",
    "mixed": "mixed: some workers share a GPU, some have theirs to themselves",
}
RESOURCE_ORDER = (*RESOURCE_FIELDS[:4], "gpus_per_node", *RESOURCE_FIELDS[4:])
"""The compose form's order (a JSONB column keeps keys in its own order)."""
RESOURCE_LABELS = {"gpus_per_node": "GPUs per node", "partition": "Partition", "nodes": "Nodes"}


@dataclass(frozen=True)
class PlanRow:
    policy: str
    parameters: str
    node: str
    devices: str
    memory: str


@dataclass(frozen=True)
class PlanTable:
    rows: list[PlanRow]
    mode: str
    slurm: str
    tasks_per_node: str
    notes: list[str]


def plan_table(placement: Any) -> PlanTable | None:
    """The plan of ``placement`` (a stored ``PlacementPlan.to_dict()``), or None if there
    is none to show."""
    if not isinstance(placement, Mapping):
        return None
    policies = placement.get("policies")
    rows = (
        [_row(item) for item in policies if isinstance(item, Mapping)]
        if isinstance(policies, list)
        else []
    )
    slurm = placement.get("slurm") if isinstance(placement.get("slurm"), Mapping) else {}
    mode = str(placement.get("mode") or "")
    notes = placement.get("notes")
    return PlanTable(
        rows=rows,
        mode=MODES.get(mode, mode or DASH),
        slurm=" ".join(str(arg) for arg in slurm.get("sbatch_args") or []) or DASH,
        tasks_per_node=_items(slurm.get("tasks_per_node")),
        notes=[str(note) for note in notes] if isinstance(notes, list) else [],
    )


def resource_facts(resources: Any) -> list[tuple[str, str]]:
    """The stored resource request as (label, value) pairs: "GPUs", "2"; a blank one a dash."""
    if not isinstance(resources, Mapping):
        return []
    known = [key for key in RESOURCE_ORDER if key in resources]
    keys = known + sorted(str(key) for key in resources if key not in {*known, "placement"})
    return [(RESOURCE_LABELS.get(key) or field_label(key), display(resources[key])) for key in keys]


def display(value: Any) -> str:
    """A stored JSON value in words: null and "" -> a dash, lists comma-separated."""
    if value is None or value == "":
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return _items(value)
    if isinstance(value, Mapping):
        return ", ".join(f"{key}: {display(item)}" for key, item in value.items()) or DASH
    return str(value)


def _row(item: Mapping[str, Any]) -> PlanRow:
    node, devices = item.get("node"), item.get("devices")
    fraction = item.get("memory_fraction")
    count = item.get("parameter_count")
    on_gpu = node is not None and bool(devices)
    return PlanRow(
        policy=str(item.get("name") or DASH),
        parameters=f"{count:,}" if type(count) is int else display(count),
        node=f"node {node}" if node is not None else "CPU",
        devices=("GPU " + _items(devices)) if on_gpu else "none (CPU)",
        memory=_percent(fraction) if on_gpu else DASH,
    )


def _percent(fraction: Any) -> str:
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        return DASH
    share = f"{fraction * 100:.0f} %" if fraction * 100 >= 1 else f"{fraction * 100:.2g} %"
    return f"{share} of each GPU" if fraction < 1 else "all of each GPU"


def _items(value: Any) -> str:
    if not isinstance(value, list) or not value:
        return DASH
    return ", ".join(display(item) for item in value)
