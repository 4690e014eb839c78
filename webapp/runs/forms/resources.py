"""The compose page's resources: backend, partition, GPUs, CPUs, memory, time limit,
Slurm account and QOS, checked against ``settings.PARTITIONS``."""

from __future__ import annotations

import math
import re
from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError

from webapp.core.configform import tag_fields

BACKENDS = ("local", "slurm")
RESOURCE_FIELDS = (
    *("backend", "partition", "gpus", "nodes", "cpus_per_gpu", "cpus", "mem_gb"),
    *("time_limit", "account", "qos"),
)
"""The resources section's fields, in the form's order (the stored ``resources``)."""
TIME_LIMIT = re.compile(
    r"^(?:(?P<days>\d{1,3})-)?(?P<hours>\d{1,3}):(?P<minutes>[0-5]\d):(?P<seconds>[0-5]\d)$"
)
SLURM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class ResourcesForm(forms.Form):
    """Where the runs go and what they ask for; checked against ``settings.PARTITIONS``."""

    use_required_attribute = False

    backend = forms.ChoiceField(
        choices=[(backend, backend) for backend in BACKENDS],
        help_text="local: this machine; slurm: a job on the cluster",
    )
    partition = forms.ChoiceField(choices=(), help_text="Where the job runs")
    nodes = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=64,
        help_text="Nodes for the job (empty: the fewest that hold the GPUs, one without "
        "GPUs); MWRA spreads the policies over them, a policy never spans nodes",
    )
    gpus = forms.IntegerField(
        min_value=0,
        max_value=4096,
        initial=0,
        help_text="GPUs for the whole job (0: every worker on CPU); MWRA splits them",
    )
    cpus_per_gpu = forms.IntegerField(
        required=False, min_value=1, max_value=1024, help_text="CPU cores per GPU"
    )
    cpus = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=100_000,
        help_text="CPU cores for the whole job (instead of cpus_per_gpu)",
    )
    mem_gb = forms.IntegerField(
        required=False, min_value=1, max_value=100_000, help_text="Memory per node, GB"
    )
    time_limit = forms.CharField(
        max_length=64, help_text="Wall-clock limit, HH:MM:SS or D-HH:MM:SS"
    )
    account = forms.CharField(required=False, max_length=64, help_text="Slurm account")
    qos = forms.CharField(required=False, max_length=64, help_text="Slurm QOS")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.partitions: dict[str, dict[str, int]] = dict(settings.PARTITIONS)
        self.fields["partition"].choices = [
            (name, _partition_label(name, spec)) for name, spec in self.partitions.items()
        ]
        tag_fields(self)

    @staticmethod
    def defaults() -> dict[str, Any]:
        backend, partition = "local", "local"
        if settings.EXECUTOR == "slurm":
            cluster = [name for name in settings.PARTITIONS if name != "local"]
            if settings.SLURM_PARTITION in cluster:
                backend, partition = "slurm", settings.SLURM_PARTITION
            elif cluster:
                backend, partition = "slurm", cluster[0]
        return {
            "backend": backend,
            "partition": partition,
            "gpus": 0,
            "time_limit": settings.SLURM_TIME_LIMIT,
            "account": settings.SLURM_ACCOUNT,
            "qos": settings.SLURM_QOS,
        }

    def clean_time_limit(self) -> str:
        value = self.cleaned_data["time_limit"].strip()
        match = TIME_LIMIT.match(value)
        if not match:
            raise ValidationError(
                f"{value!r} is not a time limit: use HH:MM:SS or D-HH:MM:SS, e.g. 12:00:00 "
                "or 2-00:00:00",
                code="bad_time_limit",
            )
        if match["days"] is not None and int(match["hours"]) > 23:
            raise ValidationError(
                f"{value!r} is not a time limit: with days, hours must be 00-23 (e.g. 1-12:00:00)",
                code="bad_time_limit",
            )
        if not any(int(match[part] or 0) for part in ("days", "hours", "minutes", "seconds")):
            raise ValidationError("the time limit must be longer than zero", code="zero")
        return value

    def clean_account(self) -> str:
        return self._slurm_name("account")

    def clean_qos(self) -> str:
        return self._slurm_name("qos")

    def _slurm_name(self, name: str) -> str:
        value = self.cleaned_data[name].strip()
        if value and not SLURM_NAME.match(value):
            raise ValidationError(
                f"{value!r} is not a valid Slurm {name}: use letters, digits, '_', '.' or '-' "
                "(no spaces or shell characters)",
                code="invalid",
            )
        return value

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        partition = data.get("partition")
        backend = data.get("backend")
        if partition and backend:
            if backend == "local" and partition != "local":
                self.add_error(
                    "partition",
                    "the local backend runs on this machine: choose partition 'local', or "
                    "backend 'slurm' for a cluster partition",
                )
            elif backend == "slurm" and partition == "local":
                self.add_error(
                    "partition",
                    "'local' is this machine, not a Slurm partition: choose a cluster "
                    "partition (settings MRL_PARTITIONS), or backend 'local'",
                )
        if (data.get("nodes") or 1) > 1 and backend == "local":
            self.add_error(
                "nodes",
                "the local backend runs on this machine, one node: leave nodes empty, or "
                "choose backend 'slurm' and a partition with several nodes",
            )
        if partition in self.partitions and "nodes" not in self.errors:
            self._check_capacity(partition, self.partitions[partition], data)
        if data.get("cpus_per_gpu") and data.get("cpus"):
            self.add_error("cpus", "give cpus_per_gpu or cpus, not both")
        if data.get("cpus_per_gpu") and data.get("gpus") == 0:
            self.add_error("cpus_per_gpu", "a job without GPUs takes cpus, not cpus_per_gpu")
        return data

    def _check_capacity(self, partition: str, spec: dict[str, int], data: dict[str, Any]) -> None:
        nodes, per_node = spec.get("nodes", 1), spec.get("gpus_per_node", 0)
        gpus = data.get("gpus")
        if data.get("nodes") and data["nodes"] > nodes:
            self.add_error(
                "nodes",
                f"more nodes than the partition has: {partition!r} has {nodes}; request at "
                f"most {nodes} or choose another partition",
            )
            return
        if gpus is not None and gpus > nodes * per_node:
            self.add_error(
                "gpus",
                f"more GPUs than the partition has: {partition!r} has {nodes * per_node} "
                f"GPUs ({nodes} node(s) x {per_node}); request at most {nodes * per_node} or "
                "choose another partition",
            )
            return
        job_nodes = data.get("nodes") or (math.ceil(gpus / per_node) if gpus and per_node else 1)
        gpus_on_node = min(gpus or 0, per_node)
        cpus_per_node = spec.get("cpus_per_node")
        if cpus_per_node and data.get("cpus_per_gpu"):
            wanted = data["cpus_per_gpu"] * gpus_on_node
            if wanted > cpus_per_node:
                self.add_error(
                    "cpus_per_gpu",
                    f"more CPUs than a node has: {data['cpus_per_gpu']} x {gpus_on_node} GPUs "
                    f"= {wanted} > {cpus_per_node} cores per node of {partition!r}",
                )
        if cpus_per_node and data.get("cpus") and data["cpus"] > cpus_per_node * job_nodes:
            self.add_error(
                "cpus",
                f"more CPUs than the partition gives this job: {job_nodes} node(s) x "
                f"{cpus_per_node} cores = {cpus_per_node * job_nodes}",
            )
        mem_per_node = spec.get("mem_gb_per_node")
        if mem_per_node and data.get("mem_gb") and data["mem_gb"] > mem_per_node:
            self.add_error(
                "mem_gb",
                f"more memory than a node has: {partition!r} nodes have {mem_per_node} GB",
            )

    def to_resources(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {name: data.get(name) for name in RESOURCE_FIELDS}


def _partition_label(name: str, spec: dict[str, int]) -> str:
    gpus = spec.get("gpus_per_node", 0)
    return f"{name} ({spec.get('nodes', 1)} node(s) x {gpus} GPU(s))"
