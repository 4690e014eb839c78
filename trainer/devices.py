"""Placement enacted (issue 21): the device a policy worker runs on, its memory share,
whether its policy fits there, and the step's GPU metrics.

MWRA (:mod:`trainer.mwra`) plans placement; the job script exports the plan per rank:

- ``MRL_DEVICES_BY_RANK``: rank i's ``CUDA_VISIBLE_DEVICES`` is the i-th ``;``-separated
  entry (``""``: no GPU, the CPU);
- ``MRL_MEMORY_FRACTION_BY_RANK``: rank i's share of its device's memory is the i-th
  ``;``-separated field (``""``: no cap, else a float in ``(0, 1]``), for policies that
  MWRA co-locates on one device.

A worker turns that into a :class:`WorkerDevice` (:func:`choose_device`), caps its CUDA
caching allocator at the share (:func:`apply`), checks that the policy fits in it before
building anything (:func:`fit_check`) and builds its model, reference and optimizer on
that device. A CPU worker runs with idle OpenMP threads asleep (:data:`CPU_WORKER_ENV`,
set before torch loads: :func:`cpu_worker_env`) and as many intra-op threads as its plan
gives it (``MRL_CPU_THREADS_BY_RANK``, :func:`cpu_threads`). Each step reports
``perf/gpu_mem_gb`` and ``perf/gpu_util`` on CUDA (:func:`begin_step`,
:func:`step_metrics`); nothing on the CPU.

Everything CUDA goes through :class:`DeviceRuntime`, a seam: :class:`TorchCuda` is
``torch.cuda``; tests pass a fake, so all of it is checked on machines without CUDA.
This module imports torch only inside :class:`TorchCuda`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from trainer import metrics as m

log = logging.getLogger("trainer.devices")

DEVICES_ENV = "MRL_DEVICES_BY_RANK"
MEMORY_FRACTION_ENV = "MRL_MEMORY_FRACTION_BY_RANK"
CPU_THREADS_ENV = "MRL_CPU_THREADS_BY_RANK"
"""Rank i's intra-op thread count is the i-th ``;``-separated entry (a CPU plan's CPUs
per task); unset: the worker divides the CPUs it may run on by the world size."""
WAIT_POLICY_ENV = "OMP_WAIT_POLICY"
CPU_WORKER_ENV = {WAIT_POLICY_ENV: "PASSIVE"}
"""What a CPU worker's environment holds before torch starts its OpenMP pool: idle
OpenMP threads sleep instead of spinning. With few threads on a busy machine the default
busy-waiting burned 3-8x the CPU time for the same steps; a setting already in the
environment is kept."""
GIB = 2**30

MASTER_BYTES = 4
"""Bytes per parameter of a policy's training state: float32, whatever its compute dtype."""


class DeviceError(RuntimeError):
    """The worker cannot run where the plan puts it; the message says why and how to fix it."""


class DeviceRuntime(Protocol):
    """What the trainer asks of CUDA (device indices are those the process sees, i.e.
    inside its ``CUDA_VISIBLE_DEVICES``)."""

    def is_available(self) -> bool: ...

    def device_count(self) -> int: ...

    def set_per_process_memory_fraction(self, fraction: float, index: int) -> None: ...

    def mem_get_info(self, index: int) -> tuple[int, int]:
        """``(free, total)`` bytes of device ``index``."""
        ...

    def max_memory_allocated(self, index: int) -> int:
        """Peak bytes allocated by tensors on ``index`` since the last reset."""
        ...

    def reset_peak_memory_stats(self, index: int) -> None: ...

    def utilization(self, index: int) -> float | None:
        """The driver's GPU utilisation of ``index`` in percent, None where unavailable."""
        ...


class TorchCuda:
    """:class:`DeviceRuntime` over ``torch.cuda``."""

    def is_available(self) -> bool:
        import torch

        return bool(torch.cuda.is_available())

    def device_count(self) -> int:
        import torch

        return int(torch.cuda.device_count())

    def set_per_process_memory_fraction(self, fraction: float, index: int) -> None:
        import torch

        torch.cuda.set_per_process_memory_fraction(fraction, index)

    def mem_get_info(self, index: int) -> tuple[int, int]:
        import torch

        free, total = torch.cuda.mem_get_info(index)
        return int(free), int(total)

    def max_memory_allocated(self, index: int) -> int:
        import torch

        return int(torch.cuda.max_memory_allocated(index))

    def reset_peak_memory_stats(self, index: int) -> None:
        import torch

        torch.cuda.reset_peak_memory_stats(index)

    def utilization(self, index: int) -> float | None:
        """``torch.cuda.utilization`` asks NVML (the ``pynvml`` / ``nvidia-ml-py``
        package); without it, or where the driver does not report it, None."""
        import torch

        try:
            return float(torch.cuda.utilization(index))
        except Exception:  # noqa: BLE001 - ModuleNotFoundError, NVML errors: not reported
            return None


@dataclass(frozen=True)
class WorkerDevice:
    """Where one worker runs: a torch device string (``"cuda:0"`` or ``"cpu"``) and the
    share of that device's memory it may use (None: no cap; always None on the CPU)."""

    device: str
    memory_fraction: float | None = None
    visible_devices: str = ""
    """The worker's ``CUDA_VISIBLE_DEVICES`` (physical indices; ``""`` on the CPU)."""

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def index(self) -> int | None:
        """The CUDA device index inside the process's visible devices; None on the CPU."""
        if not self.is_cuda:
            return None
        _, _, index = self.device.partition(":")
        return int(index) if index else 0


def _rank_field(env: Mapping[str, str], name: str, rank: int) -> str | None:
    """Rank ``rank``'s ``;``-separated field of ``env[name]``; None when ``name`` is unset."""
    value = env.get(name)
    if value is None:
        return None
    fields = value.split(";")
    if rank >= len(fields):
        raise DeviceError(
            f"{name}={value!r} has {len(fields)} entries but this is rank {rank}; the job "
            "script must export one entry per policy, in pool order"
        )
    return fields[rank].strip()


def visible_devices(rank: int, env: Mapping[str, str]) -> str | None:
    """Rank ``rank``'s ``CUDA_VISIBLE_DEVICES`` from the plan (``"0,1"``, ``""`` for the
    CPU); None when the job exported no plan (``MRL_DEVICES_BY_RANK`` unset). The entry
    is passed to CUDA as it is (indices, or GPU/MIG UUIDs)."""
    return _rank_field(env, DEVICES_ENV, rank)


def memory_fraction(rank: int, env: Mapping[str, str]) -> float | None:
    """Rank ``rank``'s planned memory share from ``MRL_MEMORY_FRACTION_BY_RANK``; None
    when unset or empty (no cap). Strict: anything but a float in ``(0, 1]`` is an error."""
    entry = _rank_field(env, MEMORY_FRACTION_ENV, rank)
    if entry is None or entry == "":
        return None
    try:
        fraction = float(entry)
    except ValueError:
        fraction = math.nan
    if not (math.isfinite(fraction) and 0.0 < fraction <= 1.0):
        raise DeviceError(
            f"{MEMORY_FRACTION_ENV}: rank {rank}'s entry {entry!r} is not a memory fraction; "
            "each entry must be empty (no cap) or a number in (0, 1]"
        )
    return fraction


def is_cpu_job(env: Mapping[str, str]) -> bool:
    """Whether every worker of the job runs on the CPU: no plan (``MRL_DEVICES_BY_RANK``
    unset) or no devices for any rank, as :func:`choose_device` decides."""
    value = env.get(DEVICES_ENV)
    return value is None or all(not entry.strip() for entry in value.split(";"))


def cpu_worker_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables to add to ``env`` so that a CPU job's workers start torch with
    :data:`CPU_WORKER_ENV` (those ``env`` sets already are kept); nothing for a job with
    GPUs, whose workers keep OpenMP's defaults."""
    if not is_cpu_job(env):
        return {}
    return {name: value for name, value in CPU_WORKER_ENV.items() if name not in env}


def cpu_threads(rank: int, world_size: int, env: Mapping[str, str], available: int) -> int:
    """The intra-op thread count of CPU worker ``rank``: its plan entry
    (``MRL_CPU_THREADS_BY_RANK``, a whole number >= 1), else ``available`` (the CPUs the
    process may run on) shared evenly by the ``world_size`` workers, at least 1."""
    entry = _rank_field(env, CPU_THREADS_ENV, rank)
    if entry:
        if not entry.isdigit() or int(entry) < 1:
            raise DeviceError(
                f"{CPU_THREADS_ENV}: rank {rank}'s entry {entry!r} is not a thread count; "
                "each entry must be a whole number >= 1 (or the variable unset)"
            )
        return int(entry)
    return max(1, available // max(1, world_size))


def choose_device(
    rank: int,
    env: Mapping[str, str],
    runtime: DeviceRuntime,
    requested_device: str | None = None,
) -> WorkerDevice:
    """The device of rank ``rank``'s worker, from the plan in ``env``.

    - Visible devices for this rank and CUDA available: ``"cuda:0"``. The job sets the
      worker's ``CUDA_VISIBLE_DEVICES`` to its planned devices (physical indices), and
      CUDA renumbers the visible devices from 0 inside the process, so the first planned
      device is always ``cuda:0`` whatever its physical index. A worker runs one model
      copy (no tensor or pipeline parallelism), so a policy given several whole devices
      runs on the first; the others stay reserved for it.
    - No visible devices (``""``) or no plan at all: ``"cpu"``, as before placement
      existed (a CPU job exports no plan; a local run without a plan stays on the CPU).
    - Visible devices but no CUDA: :class:`DeviceError`, naming the rank and devices.
      This is an error, not a warning with a CPU fallback: the plan (and the Slurm
      request) gave this policy GPUs, so a CPU fallback would hold the GPUs idle, run
      one to two orders of magnitude slower, co-located policies would no longer share
      what was planned, and the run's numbers (timings, memory) would silently describe
      another machine. It is a setup fault to fix (a CPU-only torch wheel, no driver, a
      node without the GPUs) and it costs nothing to fail before training.

    ``requested_device`` overrides the plan's choice: ``"cpu"`` always runs on the CPU
    (no memory cap); ``"cuda"``/``"cuda:N"`` needs CUDA and an index among the visible
    devices. The memory fraction (``MRL_MEMORY_FRACTION_BY_RANK``) is parsed strictly in
    every case and kept only on CUDA.
    """
    devices = visible_devices(rank, env)
    fraction = memory_fraction(rank, env)
    if requested_device is not None:
        return _requested(rank, requested_device, devices, fraction, runtime)
    if not devices:
        return WorkerDevice("cpu")
    if not runtime.is_available() or runtime.device_count() < 1:
        raise DeviceError(
            f"rank {rank} is planned on GPU(s) {devices} ({DEVICES_ENV}) but CUDA is not "
            f"available in its process (CUDA_VISIBLE_DEVICES={devices}): a GPU job on a node "
            "without usable CUDA. Check that the node has those GPUs and its driver loaded "
            "(nvidia-smi) and that the trainer's torch is a CUDA build "
            "(python -c 'import torch; print(torch.version.cuda)'); to train on the CPU, "
            "plan the run with no GPUs"
        )
    return WorkerDevice("cuda:0", fraction, devices)


def _requested(
    rank: int,
    requested: str,
    devices: str | None,
    fraction: float | None,
    runtime: DeviceRuntime,
) -> WorkerDevice:
    kind, _, index_text = requested.partition(":")
    if kind == "cpu" and not index_text:
        return WorkerDevice("cpu")
    if kind != "cuda" or (index_text and not index_text.isdigit()):
        raise DeviceError(f"rank {rank}: unknown device {requested!r}; use 'cpu' or 'cuda[:N]'")
    index = int(index_text or 0)
    if not runtime.is_available():
        raise DeviceError(f"rank {rank}: device {requested!r} requested but CUDA is not available")
    count = runtime.device_count()
    if index >= count:
        raise DeviceError(
            f"rank {rank}: device {requested!r} requested but the process sees {count} "
            f"CUDA device(s) (CUDA_VISIBLE_DEVICES={devices or 'unset'})"
        )
    return WorkerDevice(f"cuda:{index}", fraction, devices or "")


def apply(worker: WorkerDevice, runtime: DeviceRuntime) -> None:
    """Cap the worker's CUDA caching allocator at its planned share of the device
    (``set_per_process_memory_fraction``); nothing without a share or on the CPU."""
    if worker.memory_fraction is None or worker.index is None:
        return
    runtime.set_per_process_memory_fraction(worker.memory_fraction, worker.index)
    log.info(
        "%s: memory capped at %.4g of the device (%s)",
        worker.device,
        worker.memory_fraction,
        MEMORY_FRACTION_ENV,
    )


@dataclass(frozen=True)
class MemoryNeed:
    """The estimated bytes a policy's training state takes on its device.

    The policy keeps its master weights, gradients and AdamW state in float32 whatever
    its compute ``dtype`` (trainer/policy.py's precision rules): weights ``4P``,
    gradients ``4P``, the two moments ``8P``, and the float32 reference copy ``4P``
    unless ``reference_on_cpu`` keeps it off the device. Total ``20P`` (``16P`` with the
    reference on the CPU). A floor, not a forecast: activations, logits, the KV cache of
    generation and the allocator's fragmentation come on top and depend on the batch
    (bf16 compute makes those smaller, not the state).
    """

    weights: int
    gradients: int
    optimizer: int
    reference: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.reference

    @classmethod
    def estimate(cls, parameter_count: int, *, reference_on_device: bool = True) -> MemoryNeed:
        tensor = parameter_count * MASTER_BYTES
        reference = tensor if reference_on_device else 0
        return cls(weights=tensor, gradients=tensor, optimizer=2 * tensor, reference=reference)


def fit_check(
    policy_name: str,
    parameter_count: int,
    dtype: str,
    worker: WorkerDevice,
    runtime: DeviceRuntime,
    *,
    reference_on_cpu: bool = False,
) -> MemoryNeed | None:
    """Fail before training when policy ``policy_name`` cannot fit in its share.

    The need is :class:`MemoryNeed` (float32 weights, gradients, two AdamW moments and,
    unless ``reference_on_cpu``, the reference copy; ``dtype`` is the compute dtype,
    named in the message); the share is ``fraction x total`` memory of the
    worker's device (fraction 1 without a cap). Raises :class:`DeviceError` with the
    numbers and the fixes when the need exceeds the share; returns the need otherwise.
    On the CPU it checks nothing and returns None (host memory is Slurm's ``--mem``).
    """
    if worker.index is None:
        return None
    need = MemoryNeed.estimate(parameter_count, reference_on_device=not reference_on_cpu)
    _, total = runtime.mem_get_info(worker.index)
    fraction = 1.0 if worker.memory_fraction is None else worker.memory_fraction
    share = fraction * total
    if need.total > share:
        raise DeviceError(
            f"policy {policy_name!r} needs ~{_gib(need.total)} GiB on {worker.device} "
            f"(weights {_gib(need.weights)}, gradients {_gib(need.gradients)}, optimizer "
            f"{_gib(need.optimizer)}, reference {_gib(need.reference)}; "
            f"{parameter_count:,} parameters, float32 state, {dtype} compute, before "
            f"activations) but its planned share is {fraction:.4g} of {_gib(total)} GiB = "
            f"{_gib(share)} GiB. Raise the policy's device_share (or let it have a device of "
            "its own), run on GPUs with more memory"
            + (
                ""
                if reference_on_cpu
                else ", or keep its reference model on the CPU (reference_on_cpu)"
            )
        )
    return need


def _gib(size: float) -> str:
    return f"{size / GIB:.1f}"


def begin_step(worker: WorkerDevice, runtime: DeviceRuntime) -> None:
    """Reset the device's peak-memory counter, so the step's peak is its own."""
    if worker.index is not None:
        runtime.reset_peak_memory_stats(worker.index)


def step_metrics(worker: WorkerDevice, runtime: DeviceRuntime) -> dict[str, float]:
    """The step's device metrics: on CUDA ``perf/gpu_mem_gb`` (the peak allocated since
    :func:`begin_step`, GiB) and ``perf/gpu_util`` (the driver's utilisation in percent,
    sampled at the end of the step) where the driver reports it; none on the CPU."""
    if worker.index is None:
        return {}
    metrics = {m.GPU_MEM_GB: runtime.max_memory_allocated(worker.index) / GIB}
    utilization = runtime.utilization(worker.index)
    if utilization is not None:
        metrics[m.GPU_UTIL] = float(utilization)
    return metrics
