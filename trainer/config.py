"""The run configuration: dataclasses with one JSON form, validated with fix-it messages.

The web app writes this JSON, the job reads it and the run page shows it. Pure Python
(no torch) so the web app can validate a config without the trainer's heavy imports.

Validation collects every problem at once and raises :class:`ConfigError`, whose
``errors`` map a field path (``"pool[1].group_size"``) to a message that says how to fix
it; the web app puts each message next to its form field. A config read from JSON
(:meth:`RunConfig.from_dict`) and one built in Python (``RunConfig(pool=[...])``) are
validated alike: constructing a :class:`RunConfig` checks every field's type, with the
messages the JSON reader gives, then every rule.

Every field declares its ``metadata``, which the compose form reads too:

- ``"help"``: what the field means (the form's help text);
- ``"label"``: its name as people read it ("NLL weight (lambda)"); default: the key in
  words;
- ``"min"`` / ``"max"``: for a number, the lowest / highest value allowed, the bound
  itself included; ``"min_open"`` / ``"max_open"``: True leaves the bound out
  (``> 0`` instead of ``>= 0``). :meth:`RunConfig.validate` checks these ranges in every
  section, each policy of the pool and every regime's section (:class:`Bounds`), with
  the message "lambda_sgt must be >= 0; got -1.0", which the form shows next to the
  field (its inputs carry the same ``min`` / ``max``);
- ``"symbol"``: the field's symbol in the paper, named after the key in that message
  ("replay_fraction (p) must be in [0, 1); got 2.0"); ``"why"``: a note that follows the
  range ("temperature must be > 0 (validation decodes greedily)"); ``"message"``: the
  whole sentence instead, for a rule better said in words ("G must be at least 2 for a
  group baseline"); "; got <value>" ends each;
- ``"usual"``: ``(low, high)``, the values a run usually takes, bounds included (a size
  setting: ``lr``, ``group_size``, ``max_new_tokens``, ``steps``). Not a rule: a value
  outside is allowed, but the compose page's Preview warns about it and asks for an
  acknowledgement before Save (:func:`usual_problem`), and the form's help text names
  the range (:func:`usual_text`).
"""

from __future__ import annotations

import copy
import json
import math
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar

from trainer.declarations import regime_names, regime_spec, section_names
from trainer.zoo.catalog import SMOLLM2_IDS, ZOO_PREFIX

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
DTYPES = ("float32", "bfloat16", "float16")
ROLLOUT_CACHES = ("dynamic", "static")
"""The KV caches of :class:`trainer.rollout.HFRolloutEngine` (its ``CACHE_KINDS``)."""
LOSS_AGGREGATIONS = ("token-mean", "seq-mean-token-mean")
KL_ESTIMATORS = ("k3",)
ADVANTAGE_ESTIMATORS = ("grpo",)
OFF_POLICY = ("none", "remix")
CHECKPOINT_OPTIMIZER_STATES = ("every", "last")
"""Which checkpoints keep the optimizer state (:attr:`RunConfig.checkpoint_optimizer_state`)."""
OBJECTIVES = ("grpo", "remix")
"""The objectives of :data:`trainer.core.OBJECTIVES` a config may name (``grpo.objective``)."""
OFF_POLICY_OBJECTIVES = {"none": "grpo", "remix": "remix"}
"""The objective each ``off_policy`` method trains with: ReMix's batches hold replayed
samples, which only the ``remix`` objective weighs by their behaviour log-probs."""
TASK_KINDS = ("arithmetic", "addition_slices", "math_file", "multiple_choice_file")
GENERATED_TASK_KINDS = ("arithmetic", "addition_slices")
"""The task kinds that generate their problems (no data files)."""
FILE_TASK_KINDS = tuple(kind for kind in TASK_KINDS if kind not in GENERATED_TASK_KINDS)
SPLITS = ("seed", "hash")
FINISHED_ONLY = ("auto", "on", "off")
"""``task.finished_only``: score only finished answers (:attr:`TaskConfig.finished_only`)."""
"""``task.split`` (:class:`trainer.tasks.arithmetic.ArithmeticTask`)."""
MAX_POOL = 8
MAX_SLICES_VAL_SIZE = 600
"""The addition_slices task's largest validation set: 150 a slice (its smallest slice's
validation part holds 158, :mod:`trainer.tasks.addition_slices`)."""
MAX_MICRO_BATCH = 65_536
"""The most sequences one forward/backward takes; the divisibility hint counts up to it."""
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
    lr: float = field(
        default=1e-4,
        metadata={
            "help": "AdamW learning rate",
            "min": 0,
            "min_open": True,
            "usual": (1e-7, 1e-3),
        },
    )
    group_size: int = field(
        default=8,
        metadata={
            "help": "G: rollouts per prompt (>= 2)",
            "min": 2,
            "usual": (2, 256),
            "message": "G must be at least 2 for a group baseline",
        },
    )
    max_new_tokens: int = field(
        default=16,
        metadata={"help": "Response length limit", "min": 1, "usual": (1, 32_768)},
    )
    temperature: float = field(
        default=1.0,
        metadata={
            "help": "Sampling temperature (> 0)",
            "min": 0,
            "min_open": True,
            "why": "(validation decodes greedily)",
        },
    )
    dtype: str = field(
        default="float32",
        metadata={
            "help": f"One of {DTYPES}. The forward passes' compute type; master weights, "
            "gradients and AdamW state stay float32. bfloat16 runs under autocast; on a CPU "
            "it pays only with bfloat16 instructions (AVX512-BF16 or AMX): on an AVX2-only "
            "CPU a SmolLM2 backward measured 23x slower than float32 (the worker's log names "
            "the CPU). float16 needs a GPU",
            "choices": DTYPES,
        },
    )
    """The compute dtype (:mod:`trainer.policy`'s precision rules): master weights,
    gradients and AdamW state are float32 whatever it is; bfloat16 / float16 run the
    forward passes under ``torch.autocast`` (float16 with a gradient scaler, on an
    accelerator only). The compose form makes a select of it (``choices``); the worker
    logs whether its CPU has native bfloat16 (:func:`trainer.policy.cpu_bf16_support`)."""
    micro_batch_size: int = field(
        default=64,
        metadata={
            "help": "Sequences per forward/backward (gradient accumulation); must divide "
            "the mini-batch (prompts_per_step x G / mini_batches) or exceed it; unused "
            "when micro_batch_tokens is set",
            "min": 1,
            "max": MAX_MICRO_BATCH,
        },
    )
    micro_batch_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Token budget of a forward/backward: consecutive sequences share a "
            "micro-batch while its padded size (sequences x longest) stays within it, "
            "one sequence at least; the loss is the same. Blank: micro_batch_size decides",
            "label": "Micro-batch tokens",
            "min": 1,
            "why": "(or null to size micro-batches by micro_batch_size)",
        },
    )
    gradient_checkpointing: bool = field(
        default=False,
        metadata={
            "help": "Recompute each layer's activations in the backward instead of keeping "
            "them (less memory, about a third more compute); the update only, never "
            "generation",
            "label": "Gradient checkpointing",
        },
    )
    reference_on_cpu: bool = field(
        default=False,
        metadata={
            "help": "Keep the reference model (the KL anchor) in CPU memory and score it "
            "there, in float32: frees its accelerator memory, slower steps",
            "label": "Reference on CPU",
        },
    )
    rollout_cache: str = field(
        default="dynamic",
        metadata={"help": f"One of {ROLLOUT_CACHES}", "label": "Rollout KV cache"},
    )
    """The KV cache generation uses (:class:`trainer.rollout.HFRolloutEngine`'s
    ``cache``): ``dynamic`` grows token by token; ``static`` is preallocated for the
    batch and ``prompt width + max_new_tokens`` (prompts left-padded to a multiple of
    16), the shape ``rollout_compile`` needs. Either samples the same distribution: the
    trainer scores the behaviour log-probs itself. The help stays ``One of (...)``: the
    compose form makes a select of it."""
    rollout_compile: bool = field(
        default=False,
        metadata={
            "help": "Let transformers torch.compile the decoding forward of generation "
            "(needs the static rollout cache; CUDA only: refused on a CPU device). The "
            "first rollouts are slower while it compiles",
            "label": "Compile rollouts",
        },
    )
    rollout_prefix_reuse: bool = field(
        default=False,
        metadata={
            "help": "Encode each prompt once and copy its KV cache to the G samples instead "
            "of encoding G identical rows (dynamic rollout cache only): the same "
            "distribution, about G times less prefill for long (few-shot) prompts",
            "label": "Reuse prompt KV prefix",
        },
    )
    update_prefix_reuse: bool = field(
        default=True,
        metadata={
            "help": "Encode a prompt once for all its samples in the update, not once per "
            "sample: the same loss to float rounding, several times faster with few-shot "
            "prompts. Ignored under gradient checkpointing",
            "label": "Reuse prompt in the update",
        },
    )
    """Whether the update's teacher-forced forwards encode a prompt once for all its
    samples (:mod:`trainer.shared_prompts`; :meth:`trainer.policy.Policy._scores`). Off,
    or under ``gradient_checkpointing`` (whose layers take no KV cache in training), or
    where no two rows of a micro-batch share a prompt, every row is encoded whole, as
    before issue 35."""
    device_share: float | None = field(
        default=None,
        metadata={
            "help": "GPUs for this policy (fractions share a device); default: MWRA",
            "min": 0,
            "min_open": True,
            "why": "(or null to let MWRA decide)",
        },
    )


@dataclass
class GRPOConfig:
    """The policy objective (SPEC section 3): its constants, which ReMix's objective takes
    too (its own are in ``remix``), and which one it is (``objective``, a name in
    :data:`trainer.core.OBJECTIVES`; null follows ``off_policy``). Defaults are the SPEC's."""

    advantage_estimator: str = field(default="grpo", metadata={"help": "Advantage registry"})
    adv_eps: float = field(
        default=1e-6,
        metadata={"help": "eps in (r - mean) / (std + eps)", "min": 0, "min_open": True},
    )
    clip_eps: float = field(
        default=0.2,
        metadata={
            "help": "PPO clip range eps_clip",
            "min": 0,
            "min_open": True,
            "max": 1,
            "max_open": True,
        },
    )
    kl_coef: float = field(
        default=0.001, metadata={"help": "beta, weight of the KL loss", "min": 0}
    )
    kl_estimator: str = field(default="k3", metadata={"help": f"One of {KL_ESTIMATORS}"})
    kl_clamp: float = field(
        default=10.0,
        metadata={"help": "Clamp of the per-token KL", "min": 0, "min_open": True},
    )
    entropy_coef: float = field(
        default=0.0, metadata={"help": "ent_coef (bonus on entropy)", "min": 0}
    )
    loss_agg: str = field(default="token-mean", metadata={"help": f"One of {LOSS_AGGREGATIONS}"})
    max_grad_norm: float = field(
        default=1.0, metadata={"help": "Gradient clipping norm", "min": 0, "min_open": True}
    )
    mini_batches: int = field(
        default=1,
        metadata={"help": "Optimizer steps per batch (the batch split evenly)", "min": 1},
    )
    epochs: int = field(default=1, metadata={"help": "Passes over each batch", "min": 1})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay", "min": 0})
    objective: str | None = field(
        default=None,
        metadata={
            "help": f"The objective the update optimises (trainer.core.OBJECTIVES). One of "
            f"{OBJECTIVES}; blank (null): the one of off_policy (remix with remix, else grpo)",
            "label": "Objective",
            "choices": OBJECTIVES,
        },
    )


@dataclass
class TaskConfig:
    """Where prompts and rewards come from."""

    kind: str = field(default="arithmetic", metadata={"help": f"One of {TASK_KINDS}"})
    levels: list[int] = field(
        default_factory=lambda: [1, 2, 3], metadata={"help": "Arithmetic difficulty levels"}
    )
    val_size: int = field(
        default=64, metadata={"help": "Held-out prompts for val/reward@1", "min": 1}
    )
    split: str = field(
        default="seed",
        metadata={
            "help": "How the arithmetic task holds out validation: 'seed' (this seed's "
            "validation prompts, out of this run's train stream) or 'hash' (a fixed part of "
            "the problem space no train stream or warm-start of any seed uses; the "
            "complementary and gap pools' warm-starts hold it out)"
        },
    )
    train_path: str | None = field(
        default=None, metadata={"help": "JSONL/Parquet train file (file tasks)"}
    )
    val_path: str | None = field(
        default=None, metadata={"help": "JSONL/Parquet validation file (file tasks)"}
    )
    system_prompt: str = field(
        default="",
        metadata={
            "help": "System message put before every prompt (each policy's chat template "
            "renders it); blank: none",
            "label": "System prompt",
        },
    )
    few_shot: int = field(
        default=0,
        metadata={
            "help": "Worked examples (problem, then its \\boxed{answer}) before every "
            "prompt, drawn once per run from the train split (never from validation), the "
            "same for every step and policy; 0: none",
            "label": "Few-shot examples",
            "min": 0,
            "usual": (0, 8),
        },
    )
    finished_only: str = field(
        default="auto",
        metadata={
            "help": "Score only finished answers: a response counts only if it ended with "
            "EOS or holds a closed \\boxed{...}; one cut off at max_new_tokens scores 0 "
            "(else its last number may score, and the regimes may teach it to peers). "
            "'auto': on when the pool has a pretrained model (SmolLM2 of the zoo, or any "
            "model directory), off for the tiny zoo; 'on'; 'off'",
            "label": "Score finished answers only",
            "choices": FINISHED_ONLY,
        },
    )
    strict_format: bool = field(
        default=False,
        metadata={
            "help": "The answer must be in a closed \\boxed{...}: no fallback to the last "
            "number (math) or to a letter stated without a box (multiple choice)",
            "label": "Strict answer format (boxed only)",
        },
    )


@dataclass
class RemixConfig:
    """ReMix off-policy reuse (SPEC 5), per policy when ``off_policy`` is ``"remix"``.

    Defaults are the SPEC's. The clip range of the mix-policy surrogate is
    ``grpo.clip_eps`` and the weight of the KL-convex constraint is ``grpo.kl_coef``.
    ``reflection_markers`` also serve ``response/self_reflection_rate``, which every run
    logs.
    """

    replay_versions: int = field(
        default=2,
        metadata={
            "help": "N: replay keeps the rollouts of the last N policy versions",
            "min": 1,
            "symbol": "N",
        },
    )
    replay_fraction: float = field(
        default=0.4,
        metadata={
            "help": "p: share of each batch's prompts taken from the replay (fresh "
            "prompts per step: round((1 - p) x prompts_per_step)); in [0, 1)",
            "min": 0,
            "max": 1,
            "max_open": True,
            "symbol": "p",
        },
    )
    updates_per_batch: int = field(
        default=2,
        metadata={
            "help": "m (UTD): passes of gradient updates over each batch",
            "min": 1,
            "symbol": "m",
        },
    )
    c_bar: float = field(
        default=1.0,
        metadata={
            "help": "V-trace truncation of replayed advantages: A x min(q_t, c_bar)",
            "min": 0,
            "min_open": True,
        },
    )
    kl_lambda_start: int = field(
        default=50, metadata={"help": "lambda(t) = 1 up to this step, then it decays", "min": 0}
    )
    kl_lambda_decay: float = field(
        default=0.1,
        metadata={"help": "lambda(t) drops by this much every kl_lambda_every steps", "min": 0},
    )
    kl_lambda_every: int = field(
        default=10, metadata={"help": "Steps per lambda(t) decrement", "min": 1}
    )
    kl_lambda_floor: float = field(
        default=0.5, metadata={"help": "Lower bound of lambda(t)", "min": 0, "max": 1}
    )
    reincarnation_step: int | None = field(
        default=50,
        metadata={
            "help": "T: after this step the reference becomes the current policy, the "
            "replay is dropped and training is plain on-policy GRPO; null: never",
            "min": 1,
            "why": "(or null to never reincarnate)",
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
    regime: str = field(
        default="standalone",
        metadata={"help": "A registered sharing regime (trainer.regimes): standalone, prp, ..."},
    )
    off_policy: str = field(default="none", metadata={"help": f"One of {OFF_POLICY}"})
    remix: RemixConfig = field(default_factory=RemixConfig)
    sections: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "Each registered regime's settings by regime name; in JSON every "
            "section is a top-level key ('prp', 'sgt', ...)",
            "regime_sections": True,
        },
    )
    success_threshold: float = field(
        default=1.0,
        metadata={
            "help": "A rollout with reward >= this counts as a success",
            "min": 0,
            "min_open": True,
            "max": 1,
            "why": "(rewards are in [0, 1])",
        },
    )
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    steps: int = field(
        default=100,
        metadata={
            "help": "Training steps (RL; a regime may run extra steps after them: "
            "sequential_sft's sft_steps)",
            "min": 1,
            "usual": (1, 100_000),
        },
    )
    prompts_per_step: int = field(
        default=32, metadata={"help": "Prompts per step (shared)", "min": 1}
    )
    val_every: int = field(default=10, metadata={"help": "Steps between val/reward@1", "min": 1})
    checkpoint_every: int = field(
        default=50, metadata={"help": "Steps between checkpoints", "min": 1}
    )
    checkpoint_keep_last: int | None = field(
        default=2,
        metadata={
            "help": "How many of the newest checkpoints to keep; older ones are deleted "
            "once a newer one is complete. Blank: keep every checkpoint (evaluating "
            "checkpoints of earlier steps needs them kept)",
            "label": "Checkpoints kept",
            "min": 1,
            "why": "(or null to keep every checkpoint)",
        },
    )
    checkpoint_optimizer_state: str = field(
        default="every",
        metadata={
            "help": "Which checkpoints hold the AdamW state (twice the model's size in "
            "float32: 1.08 GB of SmolLM2-135M's 1.6 GB checkpoint). 'every': all of them, "
            "so a run resumes exactly from any. 'last': only the newest (each older one "
            "loses it once a newer one is complete); resuming from the newest is still "
            "exact, but resuming from an older one restarts AdamW's moments from zero, "
            "which is not an exact resume",
            "label": "Optimizer state in",
            "choices": CHECKPOINT_OPTIMIZER_STATES,
        },
    )
    seed: int = field(default=0, metadata={"help": "Seeds prompts, init and sampling", "min": 0})

    def __post_init__(self) -> None:
        """The chosen regime gets its section (defaults if absent; other regimes' sections
        are not kept: a regime owns its section), then the whole config is validated, as
        :meth:`from_dict` validates one read from JSON (a :class:`ConfigError` with the
        same paths and messages)."""
        if isinstance(self.sections, dict):
            registered = section_names()
            for name in [name for name in self.sections if name in registered]:
                if name != self.regime:
                    del self.sections[name]
            if self.regime in registered:
                self.sections.setdefault(self.regime, regime_spec(self.regime).section())
        self.validate()

    def section(self, regime: str) -> Any:
        """The settings of ``regime`` (its :class:`~trainer.declarations.RegimeSpec`
        config): this config's own for its regime, another regime's defaults (not kept)."""
        if regime in self.sections:
            return self.sections[regime]
        section = regime_spec(regime).section()
        if regime == self.regime:
            self.sections[regime] = section
        return section

    @property
    def objective(self) -> str:
        """The name in :data:`trainer.core.OBJECTIVES` of the objective the update
        optimises: ``grpo.objective``, or when it is null the one of ``off_policy``
        (:data:`OFF_POLICY_OBJECTIVES`: ``remix`` under ReMix, else ``grpo``), so a config
        stored before the field existed means what it meant."""
        return self.grpo.objective or OFF_POLICY_OBJECTIVES.get(self.off_policy, "grpo")

    @property
    def total_steps(self) -> int:
        """The run's last step: its ``steps``, plus the steps its regime runs after them
        (its section's optional ``extra_steps()``: ``sequential_sft``'s SFT stage)."""
        extra = getattr(self.sections.get(self.regime), "extra_steps", None)
        return self.steps + (extra() if extra is not None else 0)

    # --- JSON ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON form: the chosen regime's section (when it has settings) is a
        top-level key where ``sections`` is; no other regime's section is written, so a
        config never names a regime it does not run (a trainer without a plug-in reads
        every config that does not choose it)."""
        data: dict[str, Any] = {}
        for name, value in asdict(self).items():
            if name != "sections":
                data[name] = value
            elif self.regime in section_names():
                data[self.regime] = asdict(self.section(self.regime))
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    @classmethod
    def from_dict(cls, data: Any) -> RunConfig:
        """The config of JSON ``data``; :class:`ConfigError` lists every problem at once:
        unknown fields and wrong types, and every range and rule the rest breaks (checked
        with each wrong or missing value at its default, and not reported under a path
        that already has a problem: one round of fixes, never one stage at a time)."""
        errors: dict[str, str] = {}
        if isinstance(data, dict):
            data = dict(data)
            sections: dict[str, Any] = {}
            chosen = data.get("regime", cls.__dataclass_fields__["regime"].default)
            for regime in section_names():
                if regime not in data:
                    continue
                section = data.pop(regime)
                if regime != chosen:
                    continue  # another regime's settings (configs stored before 2026-12)
                section_class = regime_spec(regime).config
                assert section_class is not None
                sections[regime] = build_dataclass(
                    section_class, section, regime, errors, lenient=True
                )
            if "sections" in data:
                errors["sections"] = (
                    f"unknown field 'sections' in config; known fields: "
                    f"{', '.join(_json_names(cls))}"
                )
            data["sections"] = sections
        broken = set(errors)
        try:
            # Constructing it validates it (the rules, over what was read).
            config = build_dataclass(cls, data, "", errors, lenient=True)
        except ConfigError as error:
            broken |= set(errors)
            for path, message in error.errors.items():
                if not _under(path, broken):
                    errors[path] = message
            raise ConfigError(errors) from None
        if errors:
            raise ConfigError(errors)
        assert isinstance(config, RunConfig)
        return config

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        return cls.from_dict(json_data(text))

    @classmethod
    def from_file(cls, path: str | Path) -> RunConfig:
        return cls.from_json(Path(path).read_text())

    # --- validation ----------------------------------------------------------------------
    def validate(self) -> None:
        """Raise :class:`ConfigError` listing every problem (no-op when all is well).

        The types, with :meth:`from_dict`'s messages (``lr="x"``: "must be a number,
        got a string"); every declared range (``metadata["min"]`` ...:
        :func:`bound_problem`) of every section, policy and regime section; and the rules
        that span fields, all in one go: a field of the wrong type is checked as its
        default, and nothing is reported under a path whose type is wrong. Run on
        construction; call it again after changing a field.
        """
        errors = self._type_problems()
        broken = set(errors)
        config = _repaired(self, broken, "") if broken else self

        def check(ok: bool, path: str, message: str) -> None:
            if not ok and path not in errors and not _under(path, broken):
                errors[path] = message

        _check_bounds(config, "", check)
        config._check_rules(check)
        if errors:
            raise ConfigError(errors)

    def _check_rules(self, check: typing.Callable[[bool, str, str], None]) -> None:
        """The rules that span fields (every field of its type)."""
        check(NAME_PATTERN.match(self.name) is not None, "name", _name_help(self.name))
        check(
            self.checkpoint_optimizer_state in CHECKPOINT_OPTIMIZER_STATES,
            "checkpoint_optimizer_state",
            f"use one of {CHECKPOINT_OPTIMIZER_STATES}: 'every' keeps the optimizer state in "
            f"every checkpoint, 'last' only in the newest; got {self.checkpoint_optimizer_state!r}",
        )
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
            check(policy.dtype in DTYPES, f"{path}.dtype", f"dtype must be one of {DTYPES}")
            for field_path, message in rollout_problems(policy).items():
                check(False, f"{path}.{field_path}", message)
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
                or policy.micro_batch_tokens is not None
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
        check(
            grpo.kl_estimator in KL_ESTIMATORS, "grpo.kl_estimator", f"use one of {KL_ESTIMATORS}"
        )
        check(
            grpo.loss_agg in LOSS_AGGREGATIONS, "grpo.loss_agg", f"use one of {LOSS_AGGREGATIONS}"
        )

        task = self.task
        check(task.kind in TASK_KINDS, "task.kind", f"use one of {TASK_KINDS}")
        if task.kind == "arithmetic":
            check(
                bool(task.levels) and all(1 <= level <= 6 for level in task.levels),
                "task.levels",
                "levels must be a non-empty list of integers from 1 to 6",
            )
            check(task.split in SPLITS, "task.split", f"use one of {SPLITS}")
        elif task.kind == "addition_slices":
            check(
                task.val_size <= MAX_SLICES_VAL_SIZE,
                "task.val_size",
                f"the addition_slices task holds out at most {MAX_SLICES_VAL_SIZE} validation "
                f"problems ({MAX_SLICES_VAL_SIZE // 4} a slice); use val_size <= "
                f"{MAX_SLICES_VAL_SIZE}",
            )
        elif task.kind in TASK_KINDS:
            check(bool(task.train_path), "task.train_path", f"a {task.kind} task needs train_path")
            check(bool(task.val_path), "task.val_path", f"a {task.kind} task needs val_path")
        check(
            task.finished_only in FINISHED_ONLY,
            "task.finished_only",
            "use 'auto' (on when the pool has a pretrained model, off for the tiny zoo), 'on' "
            f"(score only answers that ended with EOS or hold a closed \\boxed{{}}) or 'off'; "
            f"got {task.finished_only!r}",
        )

        self._validate_regime(check)
        check(self.off_policy in OFF_POLICY, "off_policy", f"use one of {OFF_POLICY}")
        self._validate_objective(check)
        self._validate_remix(check)

    def _type_problems(self) -> dict[str, str]:
        """Where a field does not hold its type, by path, in :meth:`from_dict`'s words."""
        errors: dict[str, str] = {}
        _check_type(RunConfig, self, "", errors)
        if not isinstance(self.sections, dict):
            errors["sections"] = (
                f"must be a dict of regime sections by regime name, got {_json_type(self.sections)}"
            )
            return errors
        for name in section_names():
            if name not in self.sections:
                continue  # registered since: section() gives its defaults
            section_class = regime_spec(name).config
            assert section_class is not None
            section = self.sections[name]
            if isinstance(section, section_class):
                _check_type(section_class, section, name, errors)
            else:
                errors[name] = f"must be a {section_class.__name__}"
        return errors

    def _validate_regime(self, check: typing.Callable[[bool, str, str], None]) -> None:
        """``regime`` names a registered regime; its section is valid (the regime's
        optional ``problems``; the ranges are checked with every section's)."""
        known = regime_names()
        check(
            self.regime in known,
            "regime",
            f"unknown regime {self.regime!r}; use one of {', '.join(known)}",
        )
        with_settings = section_names()
        for name, section in self.sections.items():
            if name not in with_settings:
                check(False, name, f"no regime {name!r} has settings; remove this section")
                continue
            rules = getattr(section, "problems", None)
            for field_name, message in (rules(self) if rules else {}).items():
                check(False, f"{name}.{field_name}", message)
        if self.regime in known and regime_spec(self.regime).shares:
            check(
                len(self.pool) >= 2,
                "pool",
                f"regime {self.regime!r} shares experience between policies: add a second "
                "policy, or use regime 'standalone'",
            )

    def _validate_objective(self, check: typing.Callable[[bool, str, str], None]) -> None:
        """``grpo.objective`` names a known objective, the one ``off_policy`` trains with
        (:data:`OFF_POLICY_OBJECTIVES`); null always does."""
        objective = self.grpo.objective
        if objective is None:
            return
        if objective not in OBJECTIVES:
            check(
                False,
                "grpo.objective",
                f"unknown objective {objective!r}; use one of {OBJECTIVES}, or null for the "
                "one of off_policy",
            )
            return
        wanted = OFF_POLICY_OBJECTIVES.get(self.off_policy)
        if wanted is None or objective == wanted:
            return
        methods = [method for method, name in OFF_POLICY_OBJECTIVES.items() if name == objective]
        check(
            False,
            "grpo.objective",
            f"off_policy {self.off_policy!r} trains with objective {wanted!r}, not "
            f"{objective!r}; set grpo.objective to {wanted!r} or null"
            + (f", or off_policy to {methods[0]!r}" if methods else ""),
        )

    def _validate_remix(self, check: typing.Callable[[bool, str, str], None]) -> None:
        """The ``remix`` section (its ranges are its fields' metadata); its cross-field
        rules apply when ``off_policy`` is remix.

        ReMix combines with every regime: the replay holds only the learner's own
        rollouts (whose behaviour policy is one of its own past versions), while peer
        rollouts (PRP) and rescued successes (SGT) are used at the step they cross, as
        without ReMix. Not supported: ``grpo.epochs`` > 1, since ``remix.updates_per_batch``
        is ReMix's number of passes over a batch and two such knobs would multiply.
        """
        remix = self.remix
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
def is_pretrained_source(source: str) -> bool:
    """Whether a policy's model source is a real pretrained model: a zoo SmolLM2
    (:data:`trainer.zoo.catalog.SMOLLM2_IDS`) or any model outside the zoo (a local
    model directory); the tiny zoo's random-init and warm-started models are not."""
    if not source.startswith(ZOO_PREFIX):
        return True
    return source[len(ZOO_PREFIX) :] in SMOLLM2_IDS


def resolve_finished_only(setting: str, model_sources: typing.Iterable[str]) -> bool:
    """``task.finished_only`` as it applies to a pool with these model sources: 'on' and
    'off' as they say; 'auto' on when any of them is pretrained
    (:func:`is_pretrained_source`), the same for every policy of the pool."""
    if setting == "auto":
        return any(is_pretrained_source(source) for source in model_sources)
    return setting == "on"


def finished_only_applies(config: RunConfig) -> bool:
    """Whether the run scores only finished answers (:func:`resolve_finished_only` of its
    task's ``finished_only`` over its pool's models)."""
    return resolve_finished_only(config.task.finished_only, [p.model for p in config.pool])


def scoring_summary(config: RunConfig) -> str:
    """Which scoring rule the run applies, in words: ``task.finished_only`` as set and as
    resolved over the pool (:func:`finished_only_applies`), and ``task.strict_format``.
    The trainer logs it once; the run page shows it."""
    task = config.task
    applies = finished_only_applies(config)
    setting = "on" if applies else "off"
    if task.finished_only == "auto":
        pretrained = [p.name for p in config.pool if is_pretrained_source(p.model)]
        why = (
            f"the pool has a pretrained model ({', '.join(pretrained)})"
            if pretrained
            else "the pool holds tiny zoo models only"
        )
        setting = f"auto, so {setting}: {why}"
    finished = (
        "only responses that ended with EOS or hold a closed \\boxed{} score"
        if applies
        else "a response cut off at max_new_tokens may score"
    )
    box = "boxed answers only" if task.strict_format else "a box, else the last number"
    return (
        f"finished_only {setting} ({finished}); "
        f"strict_format {'on' if task.strict_format else 'off'} ({box})"
    )


def stored_total_steps(data: Any) -> int | None:
    """:attr:`RunConfig.total_steps` of a stored run config (its JSON data), read without
    validating it, for what shows a run's progress (step N of M): ``steps`` plus the
    ``extra_steps()`` of its regime's section (its fields as stored, defaults for the
    rest). None when ``steps`` is not a positive integer; just ``steps`` when the regime
    or its section cannot be read."""
    steps = data.get("steps") if isinstance(data, dict) else None
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        return None
    regime = data.get("regime", "standalone")
    try:
        section = regime_spec(regime).settings_from(data.get(regime))
    except (KeyError, TypeError, ValueError):
        return steps
    extra = getattr(section, "extra_steps", None)
    added = extra() if extra is not None else 0
    valid = isinstance(added, int) and not isinstance(added, bool) and added >= 0
    return steps + added if valid else steps


def remix_fresh_prompts(prompts_per_step: int, replay_fraction: float) -> int:
    """Fresh prompts per ReMix step: the batch's other share ``p`` comes from the replay."""
    return round((1.0 - replay_fraction) * prompts_per_step)


def rollout_problems(policy: PolicyConfig) -> dict[str, str]:
    """What is wrong with ``policy``'s rollout engine settings, by field name, each with
    how to fix it: an unknown ``rollout_cache``, ``rollout_compile`` without the static
    cache, or ``rollout_prefix_reuse`` with it. That compilation needs CUDA is checked
    where the device is known (:class:`trainer.policy.Policy`), since the config does not
    say where a policy runs."""
    problems: dict[str, str] = {}
    if policy.rollout_cache not in ROLLOUT_CACHES:
        problems["rollout_cache"] = (
            f"unknown rollout_cache {policy.rollout_cache!r}; use one of {ROLLOUT_CACHES}"
        )
    elif policy.rollout_compile and policy.rollout_cache != "static":
        problems["rollout_compile"] = (
            "rollout_compile compiles the static-cache forward: set rollout_cache to "
            "'static', or turn rollout_compile off"
        )
    if policy.rollout_prefix_reuse and policy.rollout_cache == "static":
        problems["rollout_prefix_reuse"] = (
            "rollout_prefix_reuse copies a dynamic KV cache: set rollout_cache to "
            "'dynamic', or turn rollout_prefix_reuse off"
        )
    return problems


def _name_help(name: str) -> str:
    return (
        f"{name!r} is not a valid name: use 1-64 letters, digits, '_', '.' or '-', "
        "starting with a letter or digit"
    )


def is_positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def is_non_negative(value: float) -> bool:
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


@dataclass(frozen=True)
class Bounds:
    """The range a number field declares in its metadata (``"min"``, ``"max"``,
    ``"min_open"``, ``"max_open"``: see the module docstring)."""

    min: float | None = None
    max: float | None = None
    min_open: bool = False
    max_open: bool = False

    @classmethod
    def of(cls, metadata: Mapping[str, Any]) -> Bounds | None:
        """The range a field's ``metadata`` declares, or None when it declares none."""
        if metadata.get("min") is None and metadata.get("max") is None:
            return None
        return cls(
            min=metadata.get("min"),
            max=metadata.get("max"),
            min_open=bool(metadata.get("min_open")),
            max_open=bool(metadata.get("max_open")),
        )

    def contains(self, value: float) -> bool:
        """Whether ``value`` is a finite number inside the range."""
        if not math.isfinite(value):
            return False
        if self.min is not None and (value <= self.min if self.min_open else value < self.min):
            return False
        return self.max is None or (value < self.max if self.max_open else value <= self.max)

    def text(self) -> str:
        """The range as a message says it: ``>= 0``, ``> 0``, ``<= 1``, ``in [0, 1)``."""
        if self.min is not None and self.max is not None:
            low, high = "(" if self.min_open else "[", ")" if self.max_open else "]"
            return f"in {low}{_number(self.min)}, {_number(self.max)}{high}"
        if self.min is not None:
            return f"{'>' if self.min_open else '>='} {_number(self.min)}"
        assert self.max is not None
        return f"{'<' if self.max_open else '<='} {_number(self.max)}"


def bound_problem(name: str, metadata: Mapping[str, Any], value: Any) -> str | None:
    """The fix-it message for ``value`` outside the range that field ``name``'s
    ``metadata`` declares ("lambda_sgt must be >= 0; got -1.0"), or None (in range, no
    range, not a number)."""
    bounds = Bounds.of(metadata)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if bounds is None or not number or bounds.contains(value):
        return None
    message = metadata.get("message")
    if not message:
        name = f"{name} ({metadata['symbol']})" if metadata.get("symbol") else name
        why = f" {metadata['why']}" if metadata.get("why") else ""
        message = f"{name} must be {bounds.text()}{why}"
    return f"{message}; got {value}"


def usual_range(metadata: Mapping[str, Any]) -> tuple[float, float] | None:
    """The ``(low, high)`` a field's ``metadata["usual"]`` declares, or None."""
    usual = metadata.get("usual")
    if usual is None:
        return None
    low, high = usual
    return float(low), float(high)


def usual_text(metadata: Mapping[str, Any]) -> str:
    """The usual range as the form's help text says it ("usual: 1e-07 to 0.001"), or ""."""
    usual = usual_range(metadata)
    if usual is None:
        return ""
    return f"usual: {_number(usual[0])} to {_number(usual[1])}"


def usual_problem(name: str, metadata: Mapping[str, Any], value: Any) -> str | None:
    """A warning for ``value`` outside the usual range that field ``name``'s ``metadata``
    declares ("lr is 1000.0, far outside the usual 1e-07 to 0.001"), or None (usual, no
    usual range, not a number). A warning, not an error: the value is allowed."""
    usual = usual_range(metadata)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if usual is None or not number or usual[0] <= value <= usual[1]:
        return None
    return f"{name} is {value}, far outside the usual {_number(usual[0])} to {_number(usual[1])}"


def _number(value: float) -> str:
    """A bound as a message writes it: 0, 1, 0.5, 65536."""
    return str(int(value)) if float(value).is_integer() else repr(value)


def _check_bounds(obj: Any, path: str, check: typing.Callable[[bool, str, str], None]) -> None:
    """Check the declared range of every number field of dataclass ``obj``, and of the
    dataclasses it holds: sections, the pool's policies, each regime's section. An int
    in a float field reads as the float JSON would give (``got -1.0``)."""
    hints = typing.get_type_hints(type(obj))
    for spec in fields(obj):
        value = getattr(obj, spec.name)
        field_path = _join(path, spec.name)
        if _is_sections(spec):
            for regime, section in value.items():
                if is_dataclass(section):
                    _check_bounds(section, regime, check)
        elif is_dataclass(value):
            _check_bounds(value, field_path, check)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if is_dataclass(item):
                    _check_bounds(item, f"{field_path}[{index}]", check)
        else:
            if type(value) is int and hints[spec.name] in (float, float | None):
                value = float(value)
            message = bound_problem(spec.name, spec.metadata, value)
            check(message is None, field_path, message or "")


def _check_type(hint: Any, value: Any, path: str, errors: dict[str, str]) -> None:
    """Record where ``value``, built in Python, is not of type ``hint``, in the words
    :func:`_convert` uses for JSON (``RunConfig.sections`` is checked by RunConfig)."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return
        (inner,) = [arg for arg in args if arg is not type(None)]
        _check_type(inner, value, path, errors)
    elif origin is dict:
        return
    elif origin is list:
        if not isinstance(value, list):
            errors[path] = f"must be a list, got {_json_type(value)}"
            return
        for index, item in enumerate(value):
            _check_type(args[0], item, f"{path}[{index}]", errors)
    elif isinstance(hint, type) and is_dataclass(hint):
        if isinstance(value, hint):
            hints = typing.get_type_hints(hint)
            for spec in fields(hint):
                name = spec.name
                _check_type(hints[name], getattr(value, name), _join(path, name), errors)
        elif is_dataclass(value) or isinstance(value, dict):
            errors[path] = f"must be a {hint.__name__}, got a {type(value).__name__}"
        else:
            errors[path] = f"{path or 'config'} must be a JSON object, got {_json_type(value)}"
    else:
        problem = _scalar_problem(hint, value, path)
        if problem:
            errors[path] = problem


def _scalar_problem(hint: Any, value: Any, path: str) -> str | None:
    """Why ``value`` is not a ``bool`` / ``int`` / ``float`` / ``str`` as ``hint`` says,
    or None; a float must be finite, a string at most 100,000 characters."""
    if hint is bool:
        if isinstance(value, bool):
            return None
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return None
    elif hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return None if math.isfinite(value) else "must be a finite number"
    elif hint is str:
        if isinstance(value, str):
            return None if len(value) <= 100_000 else "is too long (100,000 characters at most)"
    else:  # pragma: no cover - a field type this module does not handle yet
        raise TypeError(f"unsupported config field type {hint!r} at {path}")
    return f"must be {_TYPE_NAMES[hint]}, got {_json_type(value)}"


T = TypeVar("T")


def json_data(text: str) -> Any:
    """``text`` parsed as JSON; malformed JSON is a :class:`ConfigError` at path ``""``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError({"": f"not valid JSON: {exc}"}) from exc


def build_dataclass(
    cls: type[T], data: Any, path: str, errors: dict[str, str], *, lenient: bool = False
) -> T | None:
    """Build dataclass ``cls`` from JSON data, recording type errors by field path; with
    any error recorded (here or before), nothing is built (None).

    ``lenient``: build it all the same, each wrong or missing value at its default (a
    required one at a placeholder of its type, :func:`_placeholder`), so that the rules
    can be checked over the rest in the same round (:meth:`RunConfig.from_dict`); the
    errors still say what is wrong."""
    where = path or "config"
    if not isinstance(data, dict):
        errors[path] = f"{where} must be a JSON object, got {_json_type(data)}"
        return _placeholder(cls) if lenient else None
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    for key in data:
        if key not in known or (_is_sections(known[key]) and not isinstance(data[key], dict)):
            errors[_join(path, key)] = (
                f"unknown field {key!r} in {where}; known fields: {', '.join(_json_names(cls))}"
            )
    kwargs: dict[str, Any] = {}
    for name, spec in known.items():
        field_path = _join(path, name)
        required = spec.default is MISSING and spec.default_factory is MISSING
        if name not in data:
            if required:
                errors[field_path] = f"missing required field {name!r}"
                if lenient:
                    kwargs[name] = _placeholder_value(hints[name])
            continue
        value = _convert(hints[name], data[name], field_path, errors, lenient=lenient)
        if value is not _INVALID:
            kwargs[name] = value
        elif lenient and required:
            kwargs[name] = _placeholder_value(hints[name])
    if errors and not lenient:
        return None
    return cls(**kwargs)


_INVALID = object()


def _under(path: str, broken: set[str]) -> bool:
    """Whether ``path`` is one of ``broken`` or inside one (``pool[1].lr`` is inside
    ``pool[1]``; everything is inside ``""``, the whole config)."""
    return any(
        not root or path == root or path.startswith((f"{root}.", f"{root}[")) for root in broken
    )


def _placeholder_value(hint: Any) -> Any:
    """A value of type ``hint`` that stands for a missing or wrong required one while the
    rest of a config is checked: "", 0, [], a dataclass of placeholders and defaults."""
    hint, optional = unwrap_optional(hint)
    if optional:
        return None
    if typing.get_origin(hint) is list:
        return []
    if typing.get_origin(hint) is dict:
        return {}
    if isinstance(hint, type) and is_dataclass(hint):
        return _placeholder(hint)
    return {bool: False, int: 0, float: 0.0, str: ""}.get(hint)


def _placeholder(cls: type[T]) -> T:
    """``cls`` with its defaults and placeholders for its required fields (see
    :func:`_placeholder_value`); never built as a config that is used."""
    hints = typing.get_type_hints(cls)
    required = {
        spec.name: _placeholder_value(hints[spec.name])
        for spec in fields(cls)  # type: ignore[arg-type]
        if spec.default is MISSING and spec.default_factory is MISSING
    }
    return cls(**required)


def _default_value(spec: Any, hint: Any) -> Any:
    """Field ``spec``'s default, or a placeholder of its type when it has none."""
    if spec.default is not MISSING:
        return spec.default
    if spec.default_factory is not MISSING:
        return spec.default_factory()
    return _placeholder_value(hint)


def unwrap_optional(hint: Any) -> tuple[Any, bool]:
    """``(T, True)`` for ``T | None`` (or ``Optional[T]``), else ``(hint, False)``."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False


def _repaired(obj: Any, broken: set[str], path: str) -> Any:
    """A shallow copy of dataclass ``obj`` whose fields at the ``broken`` paths (of the
    wrong type) hold their defaults instead, so every other field can be checked; the
    copy is not validated (it only serves :meth:`RunConfig.validate`)."""
    hints = typing.get_type_hints(type(obj))
    repaired = copy.copy(obj)
    for spec in fields(obj):
        field_path = _join(path, spec.name)
        if not any(_under(problem, {field_path}) for problem in broken):
            continue
        value = getattr(obj, spec.name)
        if field_path in broken:
            value = _default_value(spec, hints[spec.name])
        elif _is_sections(spec) and isinstance(value, dict):
            value = {
                name: (
                    _section_default(name)
                    if name in broken
                    else _repaired(section, broken, name)
                    if is_dataclass(section)
                    else section
                )
                for name, section in value.items()
            }
        elif is_dataclass(value):
            value = _repaired(value, broken, field_path)
        elif isinstance(value, list) and _dataclass_items(hints[spec.name]):
            item_hint = _dataclass_items(hints[spec.name])
            value = [
                _placeholder(item_hint)
                if f"{field_path}[{index}]" in broken
                else _repaired(item, broken, f"{field_path}[{index}]")
                for index, item in enumerate(value)
            ]
        else:  # a list of scalars with a wrong item
            value = _default_value(spec, hints[spec.name])
        setattr(repaired, spec.name, value)
    return repaired


def _dataclass_items(hint: Any) -> Any:
    """The item type of a list-of-dataclasses field's ``hint`` (the pool's), else None."""
    hint, _ = unwrap_optional(hint)
    args = typing.get_args(hint) if typing.get_origin(hint) is list else ()
    item = args[0] if args else None
    return item if isinstance(item, type) and is_dataclass(item) else None


def _section_default(name: str) -> Any:
    return regime_spec(name).section()


def _is_sections(spec: Any) -> bool:
    return bool(spec.metadata.get("regime_sections"))


def _json_names(cls: type) -> list[str]:
    """The keys of ``cls``'s JSON form: RunConfig's ``sections`` are the regimes' names."""
    names: list[str] = []
    for spec in fields(cls):  # type: ignore[arg-type]
        if _is_sections(spec):
            names.extend(section_names())
        else:
            names.append(spec.name)
    return names


def _convert(
    hint: Any, value: Any, path: str, errors: dict[str, str], *, lenient: bool = False
) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [arg for arg in args if arg is not type(None)]
        return _convert(inner, value, path, errors, lenient=lenient)
    if origin is dict:
        # RunConfig.sections: already built, section by section, by RunConfig.from_dict.
        return value
    if origin is list:
        if not isinstance(value, list):
            errors[path] = f"must be a list, got {_json_type(value)}"
            return _INVALID
        items = [
            _convert(args[0], item, f"{path}[{i}]", errors, lenient=lenient)
            for i, item in enumerate(value)
        ]
        return _INVALID if any(item is _INVALID for item in items) else items
    if isinstance(hint, type) and hasattr(hint, "__dataclass_fields__"):
        built = build_dataclass(hint, value, path, errors, lenient=lenient)
        return _INVALID if built is None else built
    problem = _scalar_problem(hint, value, path)
    if problem:
        errors[path] = problem
        return _INVALID
    return float(value) if hint is float else value


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
