"""Which metrics the run page charts, grouped as a researcher reads them.

Each chart shows one metric key with one trace per policy. Keys a run never reported
are skipped; keys not listed here appear under "Other".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MetricGroup:
    slug: str
    title: str
    keys: tuple[str, ...]


METRIC_GROUPS: tuple[MetricGroup, ...] = (
    MetricGroup("rewards", "Rewards", ("train/reward_mean", "val/reward@1", "train/accuracy")),
    MetricGroup("entropy", "Entropy", ("actor/entropy",)),
    MetricGroup("kl", "KL loss and coefficient", ("actor/kl_loss", "actor/kl_coef")),
    MetricGroup(
        "pg", "Policy-gradient loss and clip fraction", ("actor/pg_loss", "actor/clip_frac")
    ),
    MetricGroup(
        "response",
        "Response length and self-reflection",
        ("response/length_mean", "response/length_max", "response/self_reflection_rate"),
    ),
    MetricGroup(
        "remix",
        "ReMix importance ratios",
        (
            "remix/is_ratio_mean",
            "remix/is_ratio_max",
            "remix/offpolicy_frac",
            "remix/kl_base",
            "remix/kl_prev",
            "remix/lambda",
        ),
    ),
    MetricGroup(
        "sharing",
        "Sharing regime",
        (
            "prp/is_weight_mean",
            "prp/is_weight_clipped_frac",
            "prp/peer_samples",
            "xgrpo/baseline_shift_mean",
            "xgrpo/pooled_std_mean",
            "sgt/rescue_set_size",
            "sgt/rescue_rate",
            "sgt/nll",
            "thl/residual_span_frac",
            "thl/mass_error",
        ),
    ),
    MetricGroup(
        "throughput",
        "Throughput",
        (
            "perf/tokens_per_s",
            "perf/step_s",
            "perf/generate_s",
            "perf/exchange_s",
            "perf/train_s",
            "perf/rollouts_total",
            "perf/response_tokens_total",
        ),
    ),
    MetricGroup("optim", "Optimiser", ("actor/grad_norm", "actor/lr")),
)


def groups_as_json() -> list[dict[str, object]]:
    """The groups for the run page's JavaScript."""
    return [{"slug": g.slug, "title": g.title, "keys": list(g.keys)} for g in METRIC_GROUPS]


def metrics_as_json() -> dict[str, dict[str, str]]:
    """Each charted metric's display facts for the page's JavaScript:
    ``{key: {"label": ..., "unit": ..., "group": slug}}``. A key missing here is shown
    by its name, under "Other"."""
    return {
        key: {"label": key, "unit": "", "group": g.slug} for g in METRIC_GROUPS for key in g.keys
    }
