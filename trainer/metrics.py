"""Metric names: part of the product's API (the dashboard plots them by these names).

Per policy per step (SPEC section 3); the pseudo-policy :data:`POOL` carries pool-wide
aggregates written by rank 0.

The end of the module is the metric catalogue, :func:`catalogue`: per key the name people
read ("Validation reward@1", not ``val/reward@1``), its unit and its chart group; the
keys every run logs are here (:data:`CORE_CATALOGUE`), each sharing regime declares its
own (:class:`trainer.declarations.RegimeSpec`). The run
page, the compare page and the exported figures all name metrics from it
(:func:`describe`, :func:`policy_label`). Every key the trainer logs must be in it (a
test checks); a key it does not know is shown by its name, under "Other".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from trainer.declarations import (
    ENTROPY_GROUP,
    KL,
    OPTIM,
    OTHER,
    PG,
    REGIMES,
    REMIX,
    RESPONSE,
    REWARDS,
    SHARING,
    THROUGHPUT,
    ChartGroup,
    MetricInfo,
    load_regimes,
    regime_families,
    regime_metrics,
    regime_names,
)

POOL = "_pool"
"""Policy name of pool-wide points (a leading underscore: no real policy can take it)."""

TRAIN_REWARD_MEAN = "train/reward_mean"
TRAIN_ACCURACY = "train/accuracy"
PG_LOSS = "actor/pg_loss"
KL_LOSS = "actor/kl_loss"
KL_COEF = "actor/kl_coef"
ENTROPY = "actor/entropy"
CLIP_FRAC = "actor/clip_frac"
GRAD_NORM = "actor/grad_norm"
LR = "actor/lr"
RESPONSE_LENGTH_MEAN = "response/length_mean"
RESPONSE_LENGTH_MAX = "response/length_max"
TOKENS_PER_S = "perf/tokens_per_s"
"""Response tokens generated in the step divided by the step's wall time."""
STEP_S = "perf/step_s"
GENERATE_S = "perf/generate_s"
EXCHANGE_S = "perf/exchange_s"
"""Time in the experience exchange and the regime's batch assembly (THL included)."""
TRAIN_S = "perf/train_s"
GPU_MEM_GB = "perf/gpu_mem_gb"
"""Peak memory allocated by tensors on the policy's GPU during the step, GiB (CUDA only)."""
GPU_UTIL = "perf/gpu_util"
"""The driver's utilisation of the policy's GPU at the end of the step, percent (CUDA only,
where the driver reports it)."""
VAL_REWARD_AT_1 = "val/reward@1"
"""Mean reward on the held-out prompts, one greedy sample (temperature 0) each."""

# --- skill against shortcut on the addition slices (trainer/tasks/addition_errors.py) ---
ERROR_CLASSES: tuple[str, ...] = (
    "correct",
    "dropped_carry",
    "spurious_carry",
    "wrong_digit_count",
    "other",
)
"""The classes of an answer to a two-digit addition, in the order they are checked."""
VAL_ERROR_PREFIX = "val/error/"
"""``val/error/<class>/<slice>``: the share of the slice's validation answers (one greedy
sample each) in that class (:func:`val_error_key`); the run page tables them."""
VAL_DISCRIMINATION_CARRY = "val/discrimination/carry"
"""Youden's J of the ones carry: ``val/reward@1/carry + val/reward@1/no_carry - 1`` (0
for never carrying and for always carrying, 1 for the skill)."""
VAL_DISCRIMINATION_OVERFLOW = "val/discrimination/overflow"
"""Youden's J of the hundreds carry: ``val/reward@1/overflow + val/reward@1/no_carry - 1``."""


def val_error_key(error_class: str, slice_name: str) -> str:
    """``val/error/<error_class>/<slice_name>`` (``val/error/spurious_carry/no_carry``)."""
    return f"{VAL_ERROR_PREFIX}{error_class}/{slice_name}"


TIMING_KEYS = frozenset(
    {TOKENS_PER_S, STEP_S, GENERATE_S, EXCHANGE_S, TRAIN_S, GPU_MEM_GB, GPU_UTIL}
)
"""Keys that depend on the machine (its speed, its GPU's allocator and load): everything
else is reproducible from the seed."""

# --- the tokenizer heterogeneity layer, under the regimes that retokenize (SPEC 4.4) ---
# Each regime declares its own keys (trainer/regimes/<name>/__init__.py).
THL_RESIDUAL_SPAN_FRAC = "thl/residual_span_frac"
THL_MASS_ERROR = "thl/mass_error"
THL_UNK_FRAC = "thl/unk_frac"
"""Share of the retokenized peer tokens that are the learner's unknown token (mean over
the samples it trained on; 0 for a lossless pair)."""
THL_TEXT_MISMATCH_FRAC = "thl/text_mismatch_frac"
"""Share of a peer response's characters that its round trip through the learner's
tokenizer does not give back (lost, replaced or inserted; mean over the samples)."""

# --- efficiency and behaviour, every run (SPEC 5) ---------------------------------------
ROLLOUTS_TOTAL = "perf/rollouts_total"
"""Fresh training rollouts this policy has generated so far (validation excluded)."""
RESPONSE_TOKENS_TOTAL = "perf/response_tokens_total"
"""Response tokens of those rollouts so far: efficiency in tokens, not only rollouts."""
SELF_REFLECTION_RATE = "response/self_reflection_rate"
"""Share of the step's fresh responses with at least one reflection marker (whole words,
case-insensitive; ``remix.reflection_markers``)."""

# --- ReMix off-policy reuse (SPEC 5), when off_policy is "remix" ----------------------
REMIX_IS_RATIO_MEAN = "remix/is_ratio_mean"
"""Mean of ``pi_theta(t) / pi_behaviour(t)`` over the batch's response tokens, as each
update's forward pass sees it (exactly 1 on fresh tokens at the first update)."""
REMIX_IS_RATIO_MAX = "remix/is_ratio_max"
REMIX_OFFPOLICY_FRAC = "remix/offpolicy_frac"
"""Replayed samples / (replayed + own fresh samples) in the batch; 0 after reincarnation."""
REMIX_KL_BASE = "remix/kl_base"
"""Token-mean k3 ``KL(pi_theta || pi_base)``, pi_base the reference (the initial policy)."""
REMIX_KL_PREV = "remix/kl_prev"
"""Token-mean k3 ``KL(pi_theta || pi_prev)``, pi_prev the policy before this batch's
updates (the behaviour policy of its fresh samples)."""
REMIX_LAMBDA = "remix/lambda"
"""lambda(t) of the KL-convex constraint at this step."""
REMIX_REPLAY_SIZE = "remix/replay_size"
"""Samples held by the replay after this step (0 after reincarnation)."""


# --- the catalogue: display names, units, chart groups --------------------------------


GROUPS: tuple[ChartGroup, ...] = (
    REWARDS,
    ENTROPY_GROUP,
    KL,
    PG,
    RESPONSE,
    REMIX,
    SHARING,
    THROUGHPUT,
    OPTIM,
)
"""The chart groups in the order the run page shows them (:data:`OTHER` comes last)."""

CORE_CATALOGUE: tuple[MetricInfo, ...] = (
    MetricInfo(TRAIN_REWARD_MEAN, "Training reward (mean)", "", REWARDS),
    MetricInfo(VAL_REWARD_AT_1, "Validation reward@1", "", REWARDS),
    MetricInfo(TRAIN_ACCURACY, "Training accuracy", "", REWARDS),
    MetricInfo(VAL_DISCRIMINATION_CARRY, "Discrimination (J) · carry", "", REWARDS),
    MetricInfo(VAL_DISCRIMINATION_OVERFLOW, "Discrimination (J) · overflow", "", REWARDS),
    MetricInfo(ENTROPY, "Entropy", "nats", ENTROPY_GROUP),
    MetricInfo(KL_LOSS, "KL loss", "nats", KL),
    MetricInfo(KL_COEF, "KL coefficient", "", KL),
    MetricInfo(PG_LOSS, "Policy-gradient loss", "", PG),
    MetricInfo(CLIP_FRAC, "Clip fraction", "", PG),
    MetricInfo(RESPONSE_LENGTH_MEAN, "Response length (mean)", "tokens", RESPONSE),
    MetricInfo(RESPONSE_LENGTH_MAX, "Response length (max)", "tokens", RESPONSE),
    MetricInfo(SELF_REFLECTION_RATE, "Self-reflection rate", "", RESPONSE),
    MetricInfo(REMIX_IS_RATIO_MEAN, "ReMix IS ratio (mean)", "", REMIX),
    MetricInfo(REMIX_IS_RATIO_MAX, "ReMix IS ratio (max)", "", REMIX),
    MetricInfo(REMIX_OFFPOLICY_FRAC, "ReMix off-policy fraction", "", REMIX),
    MetricInfo(REMIX_KL_BASE, "ReMix KL to the base policy", "nats", REMIX),
    MetricInfo(REMIX_KL_PREV, "ReMix KL to the previous policy", "nats", REMIX),
    MetricInfo(REMIX_LAMBDA, "ReMix λ", "", REMIX),
    MetricInfo(REMIX_REPLAY_SIZE, "ReMix replay size", "samples", REMIX),
    MetricInfo(THL_RESIDUAL_SPAN_FRAC, "THL residual-span fraction", "", SHARING),
    MetricInfo(THL_MASS_ERROR, "THL mass error", "", SHARING),
    MetricInfo(THL_UNK_FRAC, "THL unknown-token fraction", "", SHARING),
    MetricInfo(THL_TEXT_MISMATCH_FRAC, "THL text-mismatch fraction", "", SHARING),
    MetricInfo(TOKENS_PER_S, "Throughput", "tokens/s", THROUGHPUT),
    MetricInfo(STEP_S, "Step time", "s", THROUGHPUT),
    MetricInfo(GENERATE_S, "Generation time", "s", THROUGHPUT),
    MetricInfo(EXCHANGE_S, "Exchange time", "s", THROUGHPUT),
    MetricInfo(TRAIN_S, "Training time", "s", THROUGHPUT),
    MetricInfo(GPU_MEM_GB, "GPU memory (peak allocated)", "GiB", THROUGHPUT),
    MetricInfo(GPU_UTIL, "GPU utilisation", "%", THROUGHPUT),
    MetricInfo(ROLLOUTS_TOTAL, "Rollouts so far", "rollouts", THROUGHPUT),
    MetricInfo(RESPONSE_TOKENS_TOTAL, "Response tokens so far", "tokens", THROUGHPUT),
    MetricInfo(GRAD_NORM, "Gradient norm", "", OPTIM),
    MetricInfo(LR, "Learning rate", "", OPTIM),
)
"""The metrics every run may log, in chart order within their group; the regimes' own
keys come from their declarations (:func:`catalogue`)."""

_EVAL_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
"""A suite's or task's name in an eval key (``trainer.config.NAME_PATTERN``)."""

CORE_FAMILIES: tuple[tuple[re.Pattern[str], str, str, ChartGroup], ...] = (
    # Per-skill validation (trainer/policy.py), when the validation set spans several
    # skills: val/reward@1/addition, val/reward@1/multiplication, ...
    (
        re.compile(r"val/reward@1/(?P<skill>[a-z0-9_]+)"),
        "Validation reward@1 · {skill}",
        "",
        REWARDS,
    ),
    # Error classes on the addition slices (trainer/tasks/addition_errors.py), one family
    # per class: val/error/spurious_carry/no_carry, ...
    *(
        (
            re.compile(rf"val/error/{error_class}/(?P<slice>[a-z0-9_]+)"),
            f"Validation errors · {error_class.replace('_', ' ')} · {{slice}}",
            "",
            REWARDS,
        )
        for error_class in ERROR_CLASSES
    ),
    # Evaluation suites (trainer/evals/evaluate.py), at the evaluated checkpoint's step:
    # eval/synthetic/larger/accuracy, eval/synthetic/larger/n, ... (SPEC 9).
    (
        re.compile(rf"eval/(?P<suite>{_EVAL_NAME})/(?P<task>{_EVAL_NAME})/accuracy"),
        "Eval accuracy · {suite}/{task}",
        "",
        REWARDS,
    ),
    (
        re.compile(rf"eval/(?P<suite>{_EVAL_NAME})/(?P<task>{_EVAL_NAME})/acc_norm"),
        "Eval accuracy (length-normalised) · {suite}/{task}",
        "",
        REWARDS,
    ),
    (
        re.compile(rf"eval/(?P<suite>{_EVAL_NAME})/(?P<task>{_EVAL_NAME})/n"),
        "Eval items · {suite}/{task}",
        "items",
        REWARDS,
    ),
)
"""Keys with a variable part, as ``(pattern, label template, unit, group)``; the label
template is formatted with the pattern's named groups."""

_PREFIX_GROUPS = {"thl": SHARING, "remix": REMIX, "perf": THROUGHPUT, "response": RESPONSE}


@dataclass(frozen=True)
class Catalogue:
    """The whole catalogue at one moment: the core keys and every registered regime's."""

    entries: tuple[MetricInfo, ...]
    """In chart order within each group: a regime's keys come before THL's, in the
    regimes' order."""
    by_key: Mapping[str, MetricInfo]
    families: tuple[tuple[re.Pattern[str], str, str, ChartGroup], ...]
    prefix_groups: Mapping[str, ChartGroup]


_cached: tuple[int, Catalogue] | None = None


def catalogue() -> Catalogue:
    """The catalogue with the regimes registered now (rebuilt only when they change)."""
    global _cached
    load_regimes()
    if _cached is not None and _cached[0] == REGIMES.version:
        return _cached[1]
    regime_entries = tuple(regime_metrics())
    first_thl = next(i for i, info in enumerate(CORE_CATALOGUE) if info.key.startswith("thl/"))
    entries = (*CORE_CATALOGUE[:first_thl], *regime_entries, *CORE_CATALOGUE[first_thl:])
    families = (
        *CORE_FAMILIES,
        *((f.pattern, f.label, f.unit, f.group) for f in regime_families()),
    )
    prefix_groups = {name: SHARING for name in regime_names()} | _PREFIX_GROUPS
    built = Catalogue(
        entries,
        MappingProxyType({info.key: info for info in entries}),
        families,
        MappingProxyType(prefix_groups),
    )
    _cached = (REGIMES.version, built)
    return built


def describe(key: str) -> MetricInfo:
    """The catalogue's entry of ``key``; for a key of a family, its entry with the
    variable parts filled in; otherwise the key itself as label, no unit, and the group
    of its prefix where that names one (``sgt/...``: the sharing regime), else Other."""
    known = catalogue()
    info = known.by_key.get(key)
    if info is not None:
        return info
    for pattern, label, unit, group in known.families:
        found = pattern.fullmatch(key)
        if found:
            return MetricInfo(key, label.format(**found.groupdict()), unit, group)
    return MetricInfo(key, key, "", known.prefix_groups.get(key.split("/", 1)[0], OTHER))


def label(key: str) -> str:
    """The display name of ``key``: "Validation reward@1" for ``val/reward@1``."""
    return describe(key).label


def axis_label(key: str) -> str:
    """The display name with its unit: "Step time (s)" for ``perf/step_s``."""
    return describe(key).axis_label


POOL_REDUCTIONS: Mapping[str, str] = MappingProxyType(
    {TRAIN_REWARD_MEAN: "mean", VAL_REWARD_AT_1: "mean", STEP_S: "max"}
)
"""The keys rank 0 writes under :data:`POOL`, and how it reduces the policies' values."""


def policy_label(policy: str, key: str | None = None) -> str:
    """The name people read for ``policy``: :data:`POOL` is "pool mean" ("pool max" for
    the one key whose pool value is the slowest policy's, ``perf/step_s``)."""
    if policy != POOL:
        return policy
    return f"pool {POOL_REDUCTIONS.get(key or '', 'mean')}"
