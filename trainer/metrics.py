"""Metric names: part of the product's API (the dashboard plots them by these names).

Per policy per step (SPEC section 3); the pseudo-policy :data:`POOL` carries pool-wide
aggregates written by rank 0.
"""

from __future__ import annotations

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
VAL_REWARD_AT_1 = "val/reward@1"
"""Mean reward on the held-out prompts, one greedy sample (temperature 0) each."""

TIMING_KEYS = frozenset({TOKENS_PER_S, STEP_S, GENERATE_S, EXCHANGE_S, TRAIN_S})
"""Keys that depend on the machine's speed: everything else is reproducible from the seed."""

# --- sharing regimes (SPEC 4) ----------------------------------------------------------
PRP_IS_WEIGHT_MEAN = "prp/is_weight_mean"
"""Mean truncated importance weight over the peer tokens the learner trained on."""
PRP_IS_WEIGHT_CLIPPED_FRAC = "prp/is_weight_clipped_frac"
"""Share of peer tokens whose weight was truncated at c_bar."""
PRP_PEER_SAMPLES = "prp/peer_samples"
XGRPO_BASELINE_SHIFT = "xgrpo/baseline_shift_mean"
"""Mean |pooled baseline - own baseline| over the step's prompts (ablation: |noise|)."""
XGRPO_POOLED_STD = "xgrpo/pooled_std_mean"
SGT_RESCUE_SET_SIZE = "sgt/rescue_set_size"
SGT_RESCUE_RATE = "sgt/rescue_rate"
"""Rescued prompts / prompts on which the learner failed all G rollouts (0 if none)."""
SGT_NLL = "sgt/nll"
THL_RESIDUAL_SPAN_FRAC = "thl/residual_span_frac"
THL_MASS_ERROR = "thl/mass_error"

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
