"""Preview's size check: how big a composed run is, and the sizes a person would question.

A config can be valid and still absurd (lr 1000, G 100,000, a million new tokens, 1e8
steps). Preview shows an estimate of one run's size (each seed is a run) and a warning
for each size worth a second look; Save then needs "I have checked these sizes" ticked
(the views, :mod:`webapp.dashboard.views_compose`). Nothing here blocks a valid config.

The estimate, all small pure functions:

- **tokens generated**: per policy ``steps x prompts_per_step x G x max_new_tokens`` (the
  most a run can generate: every response at its length limit), summed over the pool;
- **memory per policy**: the training state of MWRA's parameter count (the count the
  placement plan shows), :class:`trainer.devices.MemoryNeed`: float32 weights, gradients,
  two AdamW moments and the reference copy, 20 bytes a parameter (16 with
  ``reference_on_cpu`` on a GPU). A floor: activations and the KV cache come on top;
- **wall time**: the step rate measured on the same backend and partition
  (:func:`measured_step_rate`: the recent completed runs' median ``perf/step_s``, each
  divided by that run's tokens per step; the median of those) times this config's tokens
  per step (the pool's ``prompts_per_step x G x max_new_tokens``, summed) times its steps.
  Linear in the tokens a step may generate; only runs whose largest model is of this
  pool's size (within :data:`SIZE_FACTOR` in parameters, :func:`comparable_size`) count,
  since a step's time grows with the model (the tiny zoo's rate made a 135M-parameter
  run look a hundred times shorter than it was); regime and hardware are taken as the
  history's. Without such a run there is no wall time, and Preview says so.

The warnings (:func:`size_warnings`): a value outside the usual range its config field
declares (``metadata["usual"]``, :func:`trainer.config.usual_problem`), a wall time over
the time limit, and CPU workers whose training state exceeds a node's memory (the
requested ``mem_gb``, else the partition's ``mem_gb_per_node``; a GPU worker's state is
on its device, whose size the partitions do not declare).
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Protocol

from trainer.config import PolicyConfig, RunConfig, usual_problem
from trainer.devices import GIB, MemoryNeed
from trainer.mwra import PlacementPlan
from trainer.mwra_counting import ParameterCount, parameter_count
from webapp.core.configform import path_title
from webapp.registry.zoo_builds import zoo_root
from webapp.runs.forms.resources import TIME_LIMIT

HISTORY_RUNS = 20
"""How many of the most recent completed runs on a backend / partition set its step rate."""
SIZE_FACTOR = 2.0
"""A completed run's step rate counts for a pool whose largest model is within this factor
of the largest model of that run's pool, in parameters (:func:`comparable_size`)."""
NO_HISTORY = "no step rate measured on this backend yet"
ACKNOWLEDGE_LABEL = "I have checked these sizes"


@dataclass(frozen=True)
class StepRate:
    """Seconds a step takes per token it may generate, measured on a backend."""

    seconds_per_token: float
    runs: int  # the completed runs it is the median of


@dataclass(frozen=True)
class PolicySize:
    name: str
    tokens: int  # the most this policy generates in one run
    parameters: int  # MWRA's count
    memory_bytes: int  # MemoryNeed.total
    on_gpu: bool
    node: int  # its node in the job (0 for a one-node job)

    @property
    def memory_text(self) -> str:
        return memory_text(self.memory_bytes)

    @property
    def tokens_text(self) -> str:
        return count_text(self.tokens)


@dataclass(frozen=True)
class SizeEstimate:
    """One run's size (see the module docstring)."""

    policies: tuple[PolicySize, ...]
    steps: int
    tokens_per_step: int
    rate: StepRate | None

    @property
    def total_tokens(self) -> int:
        return sum(policy.tokens for policy in self.policies)

    @property
    def total_tokens_text(self) -> str:
        return count_text(self.total_tokens)

    @property
    def wall_seconds(self) -> float | None:
        if self.rate is None:
            return None
        return self.rate.seconds_per_token * self.tokens_per_step * self.steps

    @property
    def wall_time_text(self) -> str:
        seconds = self.wall_seconds
        if seconds is None:
            return NO_HISTORY
        runs = self.rate.runs if self.rate else 0
        return (
            f"about {duration_text(seconds)} (from the step rate of {runs} recent completed "
            f"run{'s' if runs != 1 else ''} on this backend, scaled by tokens per step)"
        )


@dataclass(frozen=True)
class SizeReport:
    """What Preview shows: the estimate and the warnings to acknowledge."""

    estimate: SizeEstimate
    warnings: tuple[str, ...]

    @property
    def digest(self) -> str:
        """The value of the acknowledgement checkbox: ticking it acknowledges these
        warnings, not whatever a later edit produces."""
        return warnings_digest(self.warnings)


# --- the estimate -------------------------------------------------------------------------
def policy_tokens_per_step(config: Mapping[str, Any], policy: Mapping[str, Any]) -> int:
    """The most tokens ``policy`` generates in one step of ``config``."""
    return (
        int(config.get("prompts_per_step", _default(RunConfig, "prompts_per_step")))
        * int(policy.get("group_size", _default(PolicyConfig, "group_size")))
        * int(policy.get("max_new_tokens", _default(PolicyConfig, "max_new_tokens")))
    )


def tokens_per_step(config: Mapping[str, Any]) -> int:
    """The most tokens the pool of ``config`` generates in one step (summed)."""
    pool = config.get("pool")
    policies = [p for p in pool if isinstance(p, Mapping)] if isinstance(pool, list) else []
    return sum(policy_tokens_per_step(config, policy) for policy in policies)


def estimate_size(
    config: Mapping[str, Any],
    parameters: Sequence[int],
    plan: PlacementPlan,
    rate: StepRate | None,
) -> SizeEstimate:
    """The size of one run of trainer JSON ``config`` (its pool in the order of
    ``parameters``, MWRA's counts, and of ``plan``'s placements)."""
    steps = int(config.get("steps", _default(RunConfig, "steps")))
    policies = []
    for policy, count, placement in zip(config["pool"], parameters, plan.policies, strict=True):
        on_gpu = bool(placement.devices)
        on_device = not (on_gpu and policy.get("reference_on_cpu"))
        need = MemoryNeed.estimate(count, reference_on_device=on_device)
        policies.append(
            PolicySize(
                name=str(policy.get("name", "")),
                tokens=steps * policy_tokens_per_step(config, policy),
                parameters=count,
                memory_bytes=need.total,
                on_gpu=on_gpu,
                node=placement.node or 0,
            )
        )
    return SizeEstimate(tuple(policies), steps, tokens_per_step(config), rate)


class StepRateSource(Protocol):
    """(backend, partition, parameters) -> the step rate measured there by runs whose
    largest model is of ``parameters``' size (any size for None), None without such a
    history: what the pages pass in (:func:`webapp.metrics.step_rates.measured_step_rate`)."""

    def __call__(
        self, backend: str, partition: str, *, parameters: int | None = None
    ) -> StepRate | None: ...


def largest_model(counts: Iterable[ParameterCount]) -> int | None:
    """The largest of MWRA's parameter counts ``counts`` that is known (not a fallback's
    1); None when none is."""
    known = [count.value for count in counts if count.origin != "fallback"]
    return max(known) if known else None


def pool_parameters(config: Mapping[str, Any], zoo_dir: Path | None = None) -> int | None:
    """The largest model of ``config``'s pool in parameters (MWRA's counts, read from the
    zoo in ``zoo_dir``, default the app's, and the models' config.json); None when no
    policy's count is known."""
    pool = config.get("pool")
    models = (
        [p.get("model") for p in pool if isinstance(p, Mapping)] if isinstance(pool, list) else []
    )
    root = zoo_root() if zoo_dir is None else zoo_dir
    return largest_model(
        parameter_count(model, zoo_dir=root) for model in models if isinstance(model, str) and model
    )


def comparable_size(parameters: int | None, other: int | None) -> bool:
    """Whether a run whose largest model has ``other`` parameters measures the step rate of
    a pool whose largest has ``parameters``: within :data:`SIZE_FACTOR` of each other (a
    pool of unknown size takes every run, an unknown run counts for no known size)."""
    if parameters is None:
        return True
    if other is None:
        return False
    return max(parameters, other) <= SIZE_FACTOR * min(parameters, other)


def run_step_rate(step_seconds: Sequence[float], config: Mapping[str, Any]) -> float | None:
    """Seconds per generated token of one finished run: the median of its step times over
    the tokens its steps may generate; None without a usable measurement."""
    times = [s for s in step_seconds if s is not None and math.isfinite(s) and s > 0]
    tokens = tokens_per_step(config)
    if not times or tokens <= 0:
        return None
    return statistics.median(times) / tokens


def combined_step_rate(rates: Sequence[float]) -> StepRate | None:
    """The step rate of several runs: the median of their rates (None for none)."""
    if not rates:
        return None
    return StepRate(statistics.median(rates), len(rates))


# --- the warnings -------------------------------------------------------------------------
def unusual_values(config: Mapping[str, Any]) -> list[str]:
    """A warning for each value of ``config`` outside its field's usual range, named as
    the page names the field ("Policy 1 · Learning rate: lr is 1000.0, far outside ...")."""
    found: list[tuple[str, str, Any]] = []  # (path, name, value), in the page's order
    policy_specs = [spec for spec in fields(PolicyConfig) if "usual" in spec.metadata]
    for index, policy in enumerate(config.get("pool") or []):
        for spec in policy_specs:
            if spec.name in policy:
                found.append((f"pool[{index}].{spec.name}", spec.name, policy[spec.name]))
    for spec in fields(RunConfig):
        if "usual" in spec.metadata and spec.name in config:
            found.append((spec.name, spec.name, config[spec.name]))
    metadata = {spec.name: spec.metadata for spec in (*fields(RunConfig), *policy_specs)}
    warnings = []
    for path, name, value in found:
        problem = usual_problem(name, metadata[name], value)
        if problem:
            warnings.append(f"{path_title(path)}: {problem}")
    return warnings


def size_warnings(
    config: Mapping[str, Any],
    estimate: SizeEstimate,
    *,
    time_limit_s: int | None,
    node_mem_gb: float | None,
) -> list[str]:
    """Every warning of ``config`` and its ``estimate``: unusual values, a wall time over
    ``time_limit_s``, CPU workers whose state exceeds ``node_mem_gb`` on a node."""
    warnings = unusual_values(config)
    wall = estimate.wall_seconds
    if wall is not None and time_limit_s is not None and wall > time_limit_s:
        warnings.append(
            f"The estimated wall time, {duration_text(wall)}, exceeds the time limit of "
            f"{duration_text(time_limit_s)}: the job would be stopped before it ends"
        )
    if node_mem_gb is not None:
        per_node: dict[int, int] = {}
        for policy in estimate.policies:
            if not policy.on_gpu:
                per_node[policy.node] = per_node.get(policy.node, 0) + policy.memory_bytes
        for node, need in sorted(per_node.items()):
            if need > node_mem_gb * GIB:
                where = f"on node {node}" if len(per_node) > 1 else "on the node"
                warnings.append(
                    f"The CPU workers {where} need at least {memory_text(need)} of memory "
                    f"for their training state, more than the {node_mem_gb:g} GB a node has "
                    "here"
                )
    return warnings


def warnings_digest(warnings: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(warnings).encode()).hexdigest()[:16]


def time_limit_seconds(text: str) -> int | None:
    """A Slurm time limit (``HH:MM:SS`` or ``D-HH:MM:SS``) in seconds; None if unreadable."""
    match = TIME_LIMIT.match(text.strip())
    if not match:
        return None
    days, hours = int(match["days"] or 0), int(match["hours"])
    return ((days * 24 + hours) * 60 + int(match["minutes"])) * 60 + int(match["seconds"])


def size_report(
    config: Mapping[str, Any],
    parameters: Sequence[int],
    plan: PlacementPlan,
    resources: Mapping[str, Any],
    partition_spec: Mapping[str, Any],
    rate: StepRate | None,
) -> SizeReport:
    """Preview's size check of a valid ``config`` placed by ``plan``, under the cleaned
    ``resources`` of the form (backend, partition, mem_gb, time_limit), at ``rate``: the
    step rate measured on that backend and partition (None without a history)."""
    estimate = estimate_size(config, parameters, plan, rate)
    mem = resources.get("mem_gb") or partition_spec.get("mem_gb_per_node")
    warnings = size_warnings(
        config,
        estimate,
        time_limit_s=time_limit_seconds(str(resources.get("time_limit") or "")),
        node_mem_gb=float(mem) if isinstance(mem, int | float) else None,
    )
    return SizeReport(estimate, tuple(warnings))


# --- a sweep's size -----------------------------------------------------------------------
@dataclass(frozen=True)
class SweepSize:
    """The sweep form's size check: what the whole grid generates and takes, and the
    warnings to acknowledge before it launches (a swept value can be one a person would
    question: Preview never saw it)."""

    runs: int
    total_tokens: int
    run_seconds: tuple[float, ...]  # each run's wall time; empty without a step rate
    at_once: int | None  # the local backend's limit; None where all may run at once
    rate: StepRate | None
    warnings: tuple[str, ...]

    @property
    def total_tokens_text(self) -> str:
        return count_text(self.total_tokens)

    @property
    def wall_time_text(self) -> str:
        """e.g. "each run about 3 min; at most 2 at once here: about 45 min in all"."""
        if not self.run_seconds:
            return NO_HISTORY
        longest = max(self.run_seconds)
        text = f"each run up to about {duration_text(longest)}"
        if self.at_once:
            whole = max(longest, sum(self.run_seconds) / self.at_once)
            at_once = f"at most {self.at_once} at once here"
            return f"{text}; {at_once}: about {duration_text(whole)} in all"
        return f"{text}, all at once where the cluster has room"

    @property
    def digest(self) -> str:
        return warnings_digest(self.warnings)


def sweep_size(
    cells: Sequence[Mapping[str, Any]],
    runs_per_cell: int,
    rate: StepRate | None,
    *,
    time_limit_s: int | None,
    at_once: int | None,
) -> SweepSize:
    """The size of a sweep of ``cells`` (the source config with each swept value, one
    cell without a swept parameter), each run ``runs_per_cell`` times (regimes x seeds):
    tokens and wall time as Preview counts one run (:func:`estimate_size`), the warnings
    of each cell's values outside their usual range and of runs over the time limit."""
    tokens = 0
    seconds: list[float] = []
    warnings: list[str] = []
    for cell in cells:
        steps = int(cell.get("steps", _default(RunConfig, "steps")))
        per_step = tokens_per_step(cell)
        tokens += runs_per_cell * steps * per_step
        if rate is not None:
            seconds += [rate.seconds_per_token * per_step * steps] * runs_per_cell
        warnings += unusual_values(cell)
    longest = max(seconds, default=None)
    if longest is not None and time_limit_s is not None and longest > time_limit_s:
        warnings.append(
            f"The longest run's estimated wall time, {duration_text(longest)}, exceeds the "
            f"time limit of {duration_text(time_limit_s)}: its job would be stopped before "
            "it ends"
        )
    unique = tuple(dict.fromkeys(warnings))
    return SweepSize(runs_per_cell * len(cells), tokens, tuple(seconds), at_once, rate, unique)


# --- as the page says it ------------------------------------------------------------------
def count_text(value: float) -> str:
    """A count as people read it: 1,536; 4.1 million; 6.4e+20."""
    if value < 1e6:
        return f"{int(value):,}"
    for scale, word in ((1e12, "trillion"), (1e9, "billion"), (1e6, "million")):
        if value < 1e15 and value >= scale:
            return f"{value / scale:.3g} {word}"
    return f"{value:.2e}"


def memory_text(size: float) -> str:
    """Bytes as GiB / MiB / KiB."""
    for unit, name in ((GIB, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if size >= unit:
            return f"{size / unit:.3g} {name}"
    return f"{int(size)} bytes"


def duration_text(seconds: float) -> str:
    """A duration as people read it: 45 s, 12 min, 3 h 20 min, 4 days 2 h, 1.2e+09 years."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    if minutes < 60:
        return f"{minutes:.0f} min"
    hours, minutes = divmod(round(minutes), 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    if days < 365:
        day_text = f"{days} day{'s' if days != 1 else ''}"
        return f"{day_text} {hours} h" if hours else day_text
    years = days / 365.25
    return f"{years:.3g} years" if years < 1e6 else f"{years:.2e} years"


def _default(cls: type, name: str) -> Any:
    return cls.__dataclass_fields__[name].default
