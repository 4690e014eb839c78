"""The run configuration: dataclasses with one JSON form, validated with fix-it messages.

The web app writes this JSON, the job reads it and the run page shows it. Pure Python
(no torch) so the web app can validate a config without the trainer's heavy imports.

Validation collects every problem at once and raises :class:`ConfigError`, whose
``errors`` map a field path (``"pool[1].group_size"``) to a message that says how to fix
it; the web app puts each message next to its form field.
"""

from __future__ import annotations

import json
import math
import re
import types
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
DTYPES = ("float32", "bfloat16", "float16")
LOSS_AGGREGATIONS = ("token-mean", "seq-mean-token-mean")
KL_ESTIMATORS = ("k3",)
ADVANTAGE_ESTIMATORS = ("grpo",)
REGIMES = ("standalone", "prp", "xgrpo", "sgt")
OFF_POLICY = ("none", "remix")
TASK_KINDS = ("arithmetic", "math_file", "multiple_choice_file")
MAX_POOL = 8
REFLECTION_MARKERS = (
    "verify",
    "re-examine",
    "double-check",
    "why",
    "root cause",
    "validate",
    "question",
    "check",
    "but",
    "wait",
    "confirm",
    "scrutinize",
    "analyze",
    "investigate",
    "probe",
)
"""SPEC 5's default self-reflection markers (after the ReMix evaluation code)."""


class ConfigError(ValueError):
    """Every problem found in a config, keyed by field path."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = dict(errors)
        lines = "\n".join(f"  {path}: {message}" for path, message in self.errors.items())
        super().__init__(f"invalid run config:\n{lines}")


@dataclass
class PolicyConfig:
    """One policy of the pool: a model, its tokenizer and its own optimisation settings."""

    name: str = field(metadata={"help": "Unique name in the pool; letters, digits, _ . -"})
    model: str = field(
        metadata={"help": "'zoo:<id>' for a tiny-zoo model, or a local HF model directory"}
    )
    tokenizer: str | None = field(
        default=None, metadata={"help": "Local tokenizer directory; default: the model's"}
    )
    chat_template: str | None = field(
        default=None, metadata={"help": "Jinja chat template; default: the tokenizer's own"}
    )
    lr: float = field(default=1e-4, metadata={"help": "AdamW learning rate"})
    group_size: int = field(default=8, metadata={"help": "G: rollouts per prompt (>= 2)"})
    max_new_tokens: int = field(default=16, metadata={"help": "Response length limit"})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature (> 0)"})
    dtype: str = field(default="float32", metadata={"help": f"One of {DTYPES}"})
    micro_batch_size: int = field(
        default=64,
        metadata={
            "help": "Sequences per forward/backward (gradient accumulation); must divide "
            "the mini-batch (prompts_per_step x G / mini_batches) or exceed it"
        },
    )
    device_share: float | None = field(
        default=None,
        metadata={"help": "GPUs for this policy (fractions share a device); default: MWRA"},
    )


@dataclass
class GRPOConfig:
    """The GRPO objective (SPEC section 3); defaults are the SPEC's."""

    advantage_estimator: str = field(default="grpo", metadata={"help": "Advantage registry"})
    adv_eps: float = field(default=1e-6, metadata={"help": "eps in (r - mean) / (std + eps)"})
    clip_eps: float = field(default=0.2, metadata={"help": "PPO clip range eps_clip"})
    kl_coef: float = field(default=0.001, metadata={"help": "beta, weight of the KL loss"})
    kl_estimator: str = field(default="k3", metadata={"help": f"One of {KL_ESTIMATORS}"})
    kl_clamp: float = field(default=10.0, metadata={"help": "Clamp of the per-token KL"})
    entropy_coef: float = field(default=0.0, metadata={"help": "ent_coef (bonus on entropy)"})
    loss_agg: str = field(default="token-mean", metadata={"help": f"One of {LOSS_AGGREGATIONS}"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping norm"})
    mini_batches: int = field(
        default=1, metadata={"help": "Optimizer steps per batch (the batch split evenly)"}
    )
    epochs: int = field(default=1, metadata={"help": "Passes over each batch"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})


@dataclass
class TaskConfig:
    """Where prompts and rewards come from."""

    kind: str = field(default="arithmetic", metadata={"help": f"One of {TASK_KINDS}"})
    levels: list[int] = field(
        default_factory=lambda: [1, 2, 3], metadata={"help": "Arithmetic difficulty levels"}
    )
    val_size: int = field(default=64, metadata={"help": "Held-out prompts for val/reward@1"})
    train_path: str | None = field(
        default=None, metadata={"help": "JSONL/Parquet train file (file tasks)"}
    )
    val_path: str | None = field(
        default=None, metadata={"help": "JSONL/Parquet validation file (file tasks)"}
    )


@dataclass
class PRPConfig:
    """Peer Rollout Pooling (SPEC 4.1): peers' rollouts join the learner's group."""

    k_peer: int = field(default=4, metadata={"help": "Peer rollouts added per prompt (>= 1)"})
    is_correction: bool = field(
        default=True,
        metadata={"help": "Truncated importance weights on peer tokens; false = naive pooling"},
    )
    c_bar: float = field(default=1.0, metadata={"help": "Truncation of the IS weight (> 0)"})


@dataclass
class XGRPOConfig:
    """Cross-policy advantage sharing (SPEC 4.2): a pooled group baseline."""

    random_perturbation: bool = field(
        default=False,
        metadata={"help": "Ablation: own baseline plus noise of matched scale, no sharing"},
    )


@dataclass
class SGTConfig:
    """Success-Gated Transfer (SPEC 4.3): NLL on peers' successes where all own failed."""

    lambda_sgt: float = field(default=0.1, metadata={"help": "Weight of the auxiliary NLL"})
    k_sgt: int = field(default=1, metadata={"help": "Peer successes per rescue prompt (>= 1)"})


@dataclass
class RemixConfig:
    """ReMix off-policy reuse (SPEC 5), per policy when ``off_policy`` is ``"remix"``.

    Defaults are the SPEC's. The clip range of the mix-policy surrogate is
    ``grpo.clip_eps`` and the weight of the KL-convex constraint is ``grpo.kl_coef``.
    ``reflection_markers`` also serve ``response/self_reflection_rate``, which every run
    logs.
    """

    replay_versions: int = field(
        default=2, metadata={"help": "N: replay keeps the rollouts of the last N policy versions"}
    )
    replay_fraction: float = field(
        default=0.4,
        metadata={
            "help": "p: share of each batch's prompts taken from the replay (fresh "
            "prompts per step: round((1 - p) x prompts_per_step)); in [0, 1)"
        },
    )
    updates_per_batch: int = field(
        default=2, metadata={"help": "m (UTD): passes of gradient updates over each batch"}
    )
    c_bar: float = field(
        default=1.0,
        metadata={"help": "V-trace truncation of replayed advantages: A x min(q_t, c_bar)"},
    )
    kl_lambda_start: int = field(
        default=50, metadata={"help": "lambda(t) = 1 up to this step, then it decays"}
    )
    kl_lambda_decay: float = field(
        default=0.1, metadata={"help": "lambda(t) drops by this much every kl_lambda_every steps"}
    )
    kl_lambda_every: int = field(default=10, metadata={"help": "Steps per lambda(t) decrement"})
    kl_lambda_floor: float = field(default=0.5, metadata={"help": "Lower bound of lambda(t)"})
    reincarnation_step: int | None = field(
        default=50,
        metadata={
            "help": "T: after this step the reference becomes the current policy, the "
            "replay is dropped and training is plain on-policy GRPO; null: never"
        },
    )
    reflection_markers: list[str] = field(
        default_factory=lambda: list(REFLECTION_MARKERS),
        metadata={
            "help": "Words/phrases counted by response/self_reflection_rate (whole words, "
            "case-insensitive)"
        },
    )


@dataclass
class RunConfig:
    """One run: a pool of policies, a regime, a task, a schedule and a seed."""

    pool: list[PolicyConfig] = field(metadata={"help": f"1..{MAX_POOL} policies"})
    name: str = field(default="run", metadata={"help": "Run name (letters, digits, _ . -)"})
    regime: str = field(default="standalone", metadata={"help": f"One of {REGIMES}"})
    off_policy: str = field(default="none", metadata={"help": f"One of {OFF_POLICY}"})
    remix: RemixConfig = field(default_factory=RemixConfig)
    prp: PRPConfig = field(default_factory=PRPConfig)
    xgrpo: XGRPOConfig = field(default_factory=XGRPOConfig)
    sgt: SGTConfig = field(default_factory=SGTConfig)
    success_threshold: float = field(
        default=1.0, metadata={"help": "A rollout with reward >= this counts as a success"}
    )
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    steps: int = field(default=100, metadata={"help": "Training steps"})
    prompts_per_step: int = field(default=32, metadata={"help": "Prompts per step (shared)"})
    val_every: int = field(default=10, metadata={"help": "Steps between val/reward@1"})
    checkpoint_every: int = field(default=50, metadata={"help": "Steps between checkpoints"})
    seed: int = field(default=0, metadata={"help": "Seeds prompts, init and sampling"})

    # --- JSON ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    @classmethod
    def from_dict(cls, data: Any) -> RunConfig:
        errors: dict[str, str] = {}
        config = _build(cls, data, "", errors)
        if errors:
            raise ConfigError(errors)
        assert isinstance(config, RunConfig)
        config.validate()
        return config

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError({"": f"not valid JSON: {exc}"}) from exc
        return cls.from_dict(data)

    @classmethod
    def from_file(cls, path: str | Path) -> RunConfig:
        return cls.from_json(Path(path).read_text())

    # --- cross-field validation --------------------------------------------------------
    def validate(self) -> None:
        """Raise :class:`ConfigError` listing every problem (no-op when all is well)."""
        errors: dict[str, str] = {}

        def check(ok: bool, path: str, message: str) -> None:
            if not ok and path not in errors:
                errors[path] = message

        check(NAME_PATTERN.match(self.name) is not None, "name", _name_help(self.name))
        check(
            1 <= len(self.pool) <= MAX_POOL,
            "pool",
            f"a pool has 1 to {MAX_POOL} policies; this one has {len(self.pool)}",
        )
        seen: dict[str, int] = {}
        for index, policy in enumerate(self.pool):
            path = f"pool[{index}]"
            check(
                NAME_PATTERN.match(policy.name) is not None, f"{path}.name", _name_help(policy.name)
            )
            if policy.name in seen:
                check(
                    False,
                    f"{path}.name",
                    f"duplicate policy name {policy.name!r} (also pool[{seen[policy.name]}]); "
                    "give each policy its own name",
                )
            seen.setdefault(policy.name, index)
            check(bool(policy.model.strip()), f"{path}.model", "name a model: 'zoo:<id>' or a path")
            check(
                policy.group_size >= 2,
                f"{path}.group_size",
                f"G must be at least 2 for a group baseline; got {policy.group_size}",
            )
            check(_positive(policy.lr), f"{path}.lr", f"lr must be > 0; got {policy.lr}")
            check(
                policy.max_new_tokens >= 1,
                f"{path}.max_new_tokens",
                f"max_new_tokens must be >= 1; got {policy.max_new_tokens}",
            )
            check(
                _positive(policy.temperature),
                f"{path}.temperature",
                f"temperature must be > 0 (validation decodes greedily); got {policy.temperature}",
            )
            check(policy.dtype in DTYPES, f"{path}.dtype", f"dtype must be one of {DTYPES}")
            check(
                policy.micro_batch_size >= 1,
                f"{path}.micro_batch_size",
                f"micro_batch_size must be >= 1; got {policy.micro_batch_size}",
            )
            check(
                policy.device_share is None or _positive(policy.device_share),
                f"{path}.device_share",
                "device_share must be > 0 (or null to let MWRA decide)",
            )
            sequences = self.prompts_per_step * policy.group_size
            per_mini_batch, remainder = divmod(sequences, max(self.grpo.mini_batches, 1))
            check(
                remainder == 0,
                "grpo.mini_batches",
                f"prompts_per_step x G = {self.prompts_per_step} x {policy.group_size} = "
                f"{sequences} must be divisible by mini_batches ({self.grpo.mini_batches})",
            )
            check(
                remainder != 0
                or policy.micro_batch_size >= per_mini_batch
                or per_mini_batch % max(policy.micro_batch_size, 1) == 0,
                f"{path}.micro_batch_size",
                f"prompts_per_step x G / mini_batches = {per_mini_batch} must be divisible by "
                f"micro_batch_size ({policy.micro_batch_size}); e.g. use "
                f"{_largest_divisor_at_most(per_mini_batch, policy.micro_batch_size)}",
            )

        grpo = self.grpo
        check(
            grpo.advantage_estimator in ADVANTAGE_ESTIMATORS,
            "grpo.advantage_estimator",
            f"use one of {ADVANTAGE_ESTIMATORS}",
        )
        check(_positive(grpo.adv_eps), "grpo.adv_eps", "adv_eps must be > 0")
        check(
            0 < grpo.clip_eps < 1,
            "grpo.clip_eps",
            f"clip_eps must be in (0, 1); got {grpo.clip_eps}",
        )
        check(_non_negative(grpo.kl_coef), "grpo.kl_coef", "kl_coef must be >= 0")
        check(
            grpo.kl_estimator in KL_ESTIMATORS, "grpo.kl_estimator", f"use one of {KL_ESTIMATORS}"
        )
        check(_positive(grpo.kl_clamp), "grpo.kl_clamp", "kl_clamp must be > 0")
        check(_non_negative(grpo.entropy_coef), "grpo.entropy_coef", "entropy_coef must be >= 0")
        check(
            grpo.loss_agg in LOSS_AGGREGATIONS, "grpo.loss_agg", f"use one of {LOSS_AGGREGATIONS}"
        )
        check(_positive(grpo.max_grad_norm), "grpo.max_grad_norm", "max_grad_norm must be > 0")
        check(grpo.mini_batches >= 1, "grpo.mini_batches", "mini_batches must be >= 1")
        check(grpo.epochs >= 1, "grpo.epochs", "epochs must be >= 1")
        check(_non_negative(grpo.weight_decay), "grpo.weight_decay", "weight_decay must be >= 0")

        task = self.task
        check(task.kind in TASK_KINDS, "task.kind", f"use one of {TASK_KINDS}")
        if task.kind == "arithmetic":
            check(
                bool(task.levels) and all(1 <= level <= 6 for level in task.levels),
                "task.levels",
                "levels must be a non-empty list of integers from 1 to 6",
            )
        elif task.kind in TASK_KINDS:
            check(bool(task.train_path), "task.train_path", f"a {task.kind} task needs train_path")
            check(bool(task.val_path), "task.val_path", f"a {task.kind} task needs val_path")
        check(task.val_size >= 1, "task.val_size", "val_size must be >= 1")

        check(
            self.regime in REGIMES,
            "regime",
            f"unknown regime {self.regime!r}; use one of {REGIMES}",
        )
        check(self.off_policy in OFF_POLICY, "off_policy", f"use one of {OFF_POLICY}")
        check(self.prp.k_peer >= 1, "prp.k_peer", "k_peer must be >= 1")
        check(_positive(self.prp.c_bar), "prp.c_bar", "c_bar must be > 0")
        check(
            _non_negative(self.sgt.lambda_sgt),
            "sgt.lambda_sgt",
            f"lambda_sgt must be a finite number >= 0; got {self.sgt.lambda_sgt}",
        )
        check(self.sgt.k_sgt >= 1, "sgt.k_sgt", "k_sgt must be >= 1")
        check(
            math.isfinite(self.success_threshold) and 0 < self.success_threshold <= 1,
            "success_threshold",
            f"success_threshold must be in (0, 1] (rewards are in [0, 1]); "
            f"got {self.success_threshold}",
        )
        if self.regime in {"prp", "xgrpo", "sgt"}:
            check(
                len(self.pool) >= 2,
                "pool",
                f"regime {self.regime!r} shares experience between policies: add a second "
                "policy, or use regime 'standalone'",
            )
        self._validate_remix(check)
        check(self.steps >= 1, "steps", "steps must be >= 1")
        check(self.prompts_per_step >= 1, "prompts_per_step", "prompts_per_step must be >= 1")
        check(self.val_every >= 1, "val_every", "val_every must be >= 1")
        check(self.checkpoint_every >= 1, "checkpoint_every", "checkpoint_every must be >= 1")
        check(self.seed >= 0, "seed", "seed must be >= 0")
        if errors:
            raise ConfigError(errors)

    def _validate_remix(self, check: typing.Callable[[bool, str, str], None]) -> None:
        """The ``remix`` section; its cross-field rules apply when ``off_policy`` is remix.

        ReMix combines with every regime: the replay holds only the learner's own
        rollouts (whose behaviour policy is one of its own past versions), while peer
        rollouts (PRP) and rescued successes (SGT) are used at the step they cross, as
        without ReMix. Not supported: ``grpo.epochs`` > 1, since ``remix.updates_per_batch``
        is ReMix's number of passes over a batch and two such knobs would multiply.
        """
        remix = self.remix
        check(
            remix.replay_versions >= 1,
            "remix.replay_versions",
            f"replay_versions (N) must be >= 1; got {remix.replay_versions}",
        )
        check(
            math.isfinite(remix.replay_fraction) and 0 <= remix.replay_fraction < 1,
            "remix.replay_fraction",
            f"replay_fraction (p) must be in [0, 1); got {remix.replay_fraction}",
        )
        check(
            remix.updates_per_batch >= 1,
            "remix.updates_per_batch",
            f"updates_per_batch (m) must be >= 1; got {remix.updates_per_batch}",
        )
        check(_positive(remix.c_bar), "remix.c_bar", f"c_bar must be > 0; got {remix.c_bar}")
        check(
            remix.kl_lambda_start >= 0,
            "remix.kl_lambda_start",
            f"kl_lambda_start must be >= 0; got {remix.kl_lambda_start}",
        )
        check(
            _non_negative(remix.kl_lambda_decay),
            "remix.kl_lambda_decay",
            f"kl_lambda_decay must be >= 0; got {remix.kl_lambda_decay}",
        )
        check(
            remix.kl_lambda_every >= 1,
            "remix.kl_lambda_every",
            f"kl_lambda_every must be >= 1; got {remix.kl_lambda_every}",
        )
        check(
            math.isfinite(remix.kl_lambda_floor) and 0 <= remix.kl_lambda_floor <= 1,
            "remix.kl_lambda_floor",
            f"kl_lambda_floor must be in [0, 1]; got {remix.kl_lambda_floor}",
        )
        check(
            remix.reincarnation_step is None or remix.reincarnation_step >= 1,
            "remix.reincarnation_step",
            "reincarnation_step must be >= 1 (or null to never reincarnate); "
            f"got {remix.reincarnation_step}",
        )
        check(
            bool(remix.reflection_markers)
            and all(marker.strip() for marker in remix.reflection_markers),
            "remix.reflection_markers",
            "reflection_markers must be a non-empty list of non-blank words or phrases",
        )
        if self.off_policy != "remix":
            return
        fresh = remix_fresh_prompts(self.prompts_per_step, remix.replay_fraction)
        if 0 <= remix.replay_fraction < 1 and self.prompts_per_step >= 1:
            check(
                fresh >= 1,
                "remix.replay_fraction",
                f"with prompts_per_step = {self.prompts_per_step}, replay_fraction "
                f"{remix.replay_fraction} leaves no fresh prompt per step; lower it or raise "
                "prompts_per_step",
            )
        check(
            self.grpo.epochs == 1,
            "grpo.epochs",
            f"with off_policy 'remix', remix.updates_per_batch sets the passes over each "
            f"batch; set grpo.epochs to 1 (got {self.grpo.epochs}) and use "
            "remix.updates_per_batch instead",
        )

    def policy(self, name: str) -> PolicyConfig:
        for policy in self.pool:
            if policy.name == name:
                return policy
        raise KeyError(name)


# --- helpers ----------------------------------------------------------------------------
def remix_fresh_prompts(prompts_per_step: int, replay_fraction: float) -> int:
    """Fresh prompts per ReMix step: the batch's other share ``p`` comes from the replay."""
    return round((1.0 - replay_fraction) * prompts_per_step)


def _name_help(name: str) -> str:
    return (
        f"{name!r} is not a valid name: use 1-64 letters, digits, '_', '.' or '-', "
        "starting with a letter or digit"
    )


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _non_negative(value: float) -> bool:
    return math.isfinite(value) and value >= 0


def _largest_divisor_at_most(total: int, limit: int) -> int:
    """The largest divisor of ``total`` that is <= ``limit`` (1 at least); O(sqrt(total))."""
    best = 1
    divisor = 1
    while divisor * divisor <= total:
        if total % divisor == 0:
            for candidate in (divisor, total // divisor):
                if best < candidate <= limit:
                    best = candidate
        divisor += 1
    return best


T = TypeVar("T")


def _build(cls: type[T], data: Any, path: str, errors: dict[str, str]) -> T | None:
    """Build dataclass ``cls`` from JSON data, recording type errors by field path."""
    where = path or "config"
    errors_before = len(errors)
    if not isinstance(data, dict):
        errors[path] = f"{where} must be a JSON object, got {_json_type(data)}"
        return None
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    for key in data:
        if key not in known:
            errors[_join(path, key)] = (
                f"unknown field {key!r} in {where}; known fields: {', '.join(known)}"
            )
    kwargs: dict[str, Any] = {}
    for name, spec in known.items():
        field_path = _join(path, name)
        if name not in data:
            if spec.default is MISSING and spec.default_factory is MISSING:
                errors[field_path] = f"missing required field {name!r}"
            continue
        value = _convert(hints[name], data[name], field_path, errors)
        if value is not _INVALID:
            kwargs[name] = value
    if len(errors) > errors_before:
        return None
    return cls(**kwargs)


_INVALID = object()


def _convert(hint: Any, value: Any, path: str, errors: dict[str, str]) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [arg for arg in args if arg is not type(None)]
        return _convert(inner, value, path, errors)
    if origin is list:
        if not isinstance(value, list):
            errors[path] = f"must be a list, got {_json_type(value)}"
            return _INVALID
        items = [_convert(args[0], item, f"{path}[{i}]", errors) for i, item in enumerate(value)]
        return _INVALID if any(item is _INVALID for item in items) else items
    if isinstance(hint, type) and hasattr(hint, "__dataclass_fields__"):
        built = _build(hint, value, path, errors)
        return _INVALID if built is None else built
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                errors[path] = "must be a finite number"
                return _INVALID
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            if len(value) > 100_000:
                errors[path] = "is too long (100,000 characters at most)"
                return _INVALID
            return value
    else:  # pragma: no cover - a field type this module does not handle yet
        raise TypeError(f"unsupported config field type {hint!r} at {path}")
    errors[path] = f"must be {_TYPE_NAMES[hint]}, got {_json_type(value)}"
    return _INVALID


_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
