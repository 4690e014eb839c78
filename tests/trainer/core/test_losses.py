"""The loss terms and the GRPO objective against hand-computed numbers (SPEC 3, 4.3),
plus invariances. ReMix's terms and objective: tests/trainer/remix/test_remix.py."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from trainer import metrics as m
from trainer.core import (
    AUX_LOSSES,
    OBJECTIVES,
    ObjectiveInputs,
    ObjectiveOutput,
    ObjectiveSettings,
    aggregate,
    clipped_surrogate,
    entropy_from_logits,
    grpo_loss,
    kl_k3,
    kl_to_reference,
    sft_nll_sum,
    token_log_probs,
    token_log_probs_and_entropy,
)

LN = math.log

# --- aggregation -------------------------------------------------------------------

VALUES = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0], [5.0, 6.0, 7.0, 8.0]])
RAGGED_MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])


def test_token_mean_on_a_ragged_mask() -> None:
    # tokens 1, 2, 3 | 10 | (none): (1 + 2 + 3 + 10) / 4 = 4
    assert aggregate(VALUES, RAGGED_MASK, "token-mean").item() == pytest.approx(4.0)


def test_seq_mean_token_mean_on_a_ragged_mask() -> None:
    # sequence means (1 + 2 + 3) / 3 = 2 and 10 / 1 = 10; the empty sequence is left
    # out: (2 + 10) / 2 = 6
    assert aggregate(VALUES, RAGGED_MASK, "seq-mean-token-mean").item() == pytest.approx(6.0)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_bool_and_float_masks_agree(mode: str) -> None:
    assert aggregate(VALUES, RAGGED_MASK.bool(), mode) == aggregate(VALUES, RAGGED_MASK, mode)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_an_empty_mask_gives_zero_not_nan(mode: str) -> None:
    assert aggregate(VALUES, torch.zeros(3, 4), mode).item() == 0.0


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("junk", [math.nan, math.inf, -math.inf, 1e30])
def test_masked_values_change_neither_aggregate_nor_gradient(mode: str, junk: float) -> None:
    clean = VALUES.clone().requires_grad_()
    aggregate(clean, RAGGED_MASK, mode).backward()
    dirty = torch.where(RAGGED_MASK.bool(), VALUES, torch.tensor(junk)).requires_grad_()
    result = aggregate(dirty, RAGGED_MASK, mode)
    result.backward()
    assert result.item() == aggregate(VALUES, RAGGED_MASK, mode).item()
    assert clean.grad is not None and dirty.grad is not None
    assert torch.equal(dirty.grad, clean.grad)


def test_aggregate_gradients_by_hand() -> None:
    # token-mean: 4 tokens -> 1/4 each; seq-mean-token-mean: 2 sequences count, the first
    # has 3 tokens -> 1/2 * 1/3 = 1/6 each, the second 1 token -> 1/2
    values = VALUES.clone().requires_grad_()
    aggregate(values, RAGGED_MASK, "token-mean").backward()
    assert values.grad is not None
    torch.testing.assert_close(values.grad, RAGGED_MASK / 4)
    values.grad = None
    aggregate(values, RAGGED_MASK, "seq-mean-token-mean").backward()
    expected = torch.tensor([[1 / 6, 1 / 6, 1 / 6, 0], [1 / 2, 0, 0, 0], [0, 0, 0, 0]])
    torch.testing.assert_close(values.grad, expected)


def _loop_token_mean(values: Tensor, mask: Tensor) -> float:
    total, count = 0.0, 0
    for i in range(values.shape[0]):
        for t in range(values.shape[1]):
            if mask[i, t]:
                total, count = total + values[i, t].item(), count + 1
    return total / count


def _loop_seq_mean_token_mean(values: Tensor, mask: Tensor) -> float:
    means = []
    for i in range(values.shape[0]):
        tokens = [values[i, t].item() for t in range(values.shape[1]) if mask[i, t]]
        if tokens:
            means.append(sum(tokens) / len(tokens))
    return sum(means) / len(means)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorised_aggregation_equals_a_python_loop(seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn(7, 11, generator=generator, dtype=torch.float64)
    lengths = torch.randint(0, 12, (7,), generator=generator)
    lengths[0] = 5  # at least one sequence with tokens
    mask = torch.arange(11) < lengths.unsqueeze(-1)
    assert aggregate(values, mask, "token-mean").item() == pytest.approx(
        _loop_token_mean(values, mask), rel=1e-12
    )
    assert aggregate(values, mask, "seq-mean-token-mean").item() == pytest.approx(
        _loop_seq_mean_token_mean(values, mask), rel=1e-12
    )


def test_unknown_aggregation_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="known: seq-mean-token-mean, token-mean"):
        aggregate(VALUES, RAGGED_MASK, "sum")


def test_mask_shape_is_checked() -> None:
    with pytest.raises(ValueError, match="mask has shape"):
        aggregate(VALUES, RAGGED_MASK[:, :3], "token-mean")


# --- clipped surrogate --------------------------------------------------------------
# Two sequences of 3 positions, eps_clip = 0.2:
#   sequence 0, A = +2, rho = [1.5, 0.5, 1.0]:
#     -min(1.5*2, 1.2*2) = -min(3, 2.4) = -2.4   clipped (upper side, A > 0)
#     -min(0.5*2, 0.8*2) = -min(1, 1.6) = -1.0   not clipped
#     -min(1.0*2, 1.0*2) = -2.0                  not clipped (tie)
#   sequence 1, A = -1, rho = [1.5, 0.5, 3.0 (masked)]:
#     -min(-1.5, -1.2) = 1.5                     not clipped
#     -min(-0.5, -0.8) = 0.8                     clipped (lower side, A < 0)
#   token-mean: (-2.4 - 1.0 - 2.0 + 1.5 + 0.8) / 5 = -3.1 / 5 = -0.62
#   seq-mean-token-mean: (-5.4 / 3 + 2.3 / 2) / 2 = (-1.8 + 1.15) / 2 = -0.325
#   clip_frac = 2 clipped / 5 tokens = 0.4
#   d loss / d logp (token-mean) = -rho * A / 5 on unclipped tokens, 0 on clipped ones:
#     [0, -0.5*2/5, -1.0*2/5] = [0, -0.2, -0.4];  [1.5/5, 0, 0] = [0.3, 0, 0]

OLD_LOGP = torch.tensor([[-1.0, -2.0, -0.5], [-0.7, -1.2, -3.0]], dtype=torch.float64)
RHO = torch.tensor([[1.5, 0.5, 1.0], [1.5, 0.5, 3.0]], dtype=torch.float64)
LOGP = OLD_LOGP + RHO.log()
ADVANTAGES = torch.tensor([2.0, -1.0], dtype=torch.float64)
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
SURROGATE_GRAD = torch.tensor([[0.0, -0.2, -0.4], [0.3, 0.0, 0.0]], dtype=torch.float64)


def test_surrogate_clips_both_sides_for_both_signs_of_the_advantage() -> None:
    out = clipped_surrogate(LOGP, OLD_LOGP, ADVANTAGES, MASK, 0.2, "token-mean")
    assert out.loss.item() == pytest.approx(-0.62)
    assert out.clip_frac.item() == pytest.approx(0.4)
    out = clipped_surrogate(LOGP, OLD_LOGP, ADVANTAGES, MASK, 0.2, "seq-mean-token-mean")
    assert out.loss.item() == pytest.approx(-0.325)
    assert out.clip_frac.item() == pytest.approx(0.4)  # clip_frac is always token-mean
    # the ratio it reports: rho on response tokens, exp(0) = 1 on the masked one
    torch.testing.assert_close(out.ratio, torch.where(MASK.bool(), RHO, 1.0))


def test_surrogate_gradient_is_zero_on_clipped_tokens() -> None:
    logp = LOGP.clone().requires_grad_()
    loss = clipped_surrogate(logp, OLD_LOGP, ADVANTAGES, MASK, 0.2, "token-mean").loss
    loss.backward()
    assert logp.grad is not None
    torch.testing.assert_close(logp.grad, SURROGATE_GRAD)
    assert logp.grad[0, 0].item() == 0.0 and logp.grad[1, 1].item() == 0.0


def test_per_token_advantages_equal_broadcast_per_sequence_ones() -> None:
    per_token = ADVANTAGES.unsqueeze(-1).expand(2, 3).clone()
    per_token[1, 2] = math.nan  # masked
    assert torch.equal(
        clipped_surrogate(LOGP, OLD_LOGP, per_token, MASK).loss,
        clipped_surrogate(LOGP, OLD_LOGP, ADVANTAGES, MASK).loss,
    )


def test_on_policy_surrogate_is_minus_the_mean_advantage() -> None:
    # rho = 1 everywhere: loss = -(2 + 2 + 2 - 1 - 1) / 5 = -0.8, nothing clipped
    out = clipped_surrogate(OLD_LOGP, OLD_LOGP, ADVANTAGES, MASK)
    assert out.loss.item() == pytest.approx(-0.8)
    assert out.clip_frac.item() == 0.0


def test_a_clip_centre_of_one_and_unit_advantage_weights_are_plain_ppo_to_the_last_bit() -> None:
    plain = clipped_surrogate(LOGP, OLD_LOGP, ADVANTAGES, MASK, 0.2, "token-mean")
    ones = torch.ones_like(LOGP)
    centred = clipped_surrogate(
        LOGP, OLD_LOGP, ADVANTAGES, MASK, 0.2, "token-mean",
        clip_center=ones, advantage_weights=ones,
    )  # fmt: skip
    assert torch.equal(centred.loss, plain.loss)
    assert torch.equal(centred.clip_frac, plain.clip_frac)


def test_the_clip_range_follows_its_centre_and_advantage_weights_scale_a() -> None:
    # One token, rho = 1.5, A = 2. Centre 1.4 (range [1.2, 1.6]) and advantage weight
    # 0.5: A_t = 1, -min(1.5 * 1, 1.5 * 1) = -1.5, unclipped (rho inside the range).
    # Centre 1.0 (range [0.8, 1.2]): -min(1.5, 1.2) = -1.2, clipped.
    old = torch.tensor([[-1.0]], dtype=torch.float64)
    logp = old + LN(1.5)
    advantages, mask = torch.tensor([2.0], dtype=torch.float64), torch.ones(1, 1)
    half = torch.full((1, 1), 0.5, dtype=torch.float64)
    inside = clipped_surrogate(
        logp, old, advantages, mask, clip_center=torch.full((1, 1), 1.4), advantage_weights=half
    )
    assert inside.loss.item() == pytest.approx(-1.5)
    assert inside.clip_frac.item() == 0.0
    clipped = clipped_surrogate(logp, old, advantages, mask, advantage_weights=half)
    assert clipped.loss.item() == pytest.approx(-1.2)
    assert clipped.clip_frac.item() == 1.0


def test_surrogate_checks_the_advantage_shape() -> None:
    with pytest.raises(ValueError, match="advantages"):
        clipped_surrogate(LOGP, OLD_LOGP, torch.zeros(3), MASK)
    with pytest.raises(ValueError, match="advantages must be"):
        clipped_surrogate(LOGP, OLD_LOGP, torch.zeros(2, 2), MASK)


# --- k3 KL --------------------------------------------------------------------------


def test_k3_at_hand_computed_points() -> None:
    # d = ref - logp; kl = e^d - d - 1
    #   d = 0     -> 1 - 0 - 1 = 0
    #   d = ln 2  -> 2 - 0.6931471806 - 1 = 0.3068528194
    #   d = -1    -> 0.3678794412 + 1 - 1 = 0.3678794412
    #   d = 1     -> 2.7182818285 - 1 - 1 = 0.7182818285
    #   d = 3     -> 20.0855369232 - 3 - 1 = 16.0855369232 -> clamped to 10
    #   d = -12   -> 0.0000061442 + 12 - 1 = 11.0000061442 -> clamped to 10
    d = torch.tensor([[0.0, LN(2), -1.0, 1.0, 3.0, -12.0]], dtype=torch.float64)
    logp = torch.full_like(d, -2.0)
    expected = torch.tensor(
        [[0.0, 0.3068528194, 0.3678794412, 0.7182818285, 10.0, 10.0]], dtype=torch.float64
    )
    torch.testing.assert_close(kl_k3(logp, logp + d), expected, atol=1e-10, rtol=0)
    # a wider clamp lets d = 3 and d = -12 through
    wide = kl_k3(logp, logp + d, clamp=20.0)
    torch.testing.assert_close(
        wide[0, 4:], torch.tensor([16.0855369232, 11.0000061442], dtype=torch.float64)
    )


def test_k3_gradient_and_clamped_tokens_get_zero_not_nan() -> None:
    # d kl / d logp = -e^d + 1: at d = ln 2 -> -1; at d = 200 (clamped) -> 0
    logp = torch.tensor([[0.0, 0.0]], dtype=torch.float32, requires_grad=True)
    ref = torch.tensor([[LN(2), 200.0]])
    kl_k3(logp, ref).sum().backward()
    assert logp.grad is not None
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.0, 0.0]]))


def test_kl_to_the_reference_is_k3_on_response_tokens_and_zero_elsewhere() -> None:
    # d = ln 2 on the response tokens (k3 = 0.3068528194); NaN on the masked one
    ref = torch.where(MASK.bool(), LOGP + LN(2), torch.tensor(math.nan, dtype=torch.float64))
    kl = kl_to_reference(LOGP, ref, MASK)
    torch.testing.assert_close(kl, 0.3068528194 * MASK, atol=1e-10, rtol=0)
    with pytest.raises(KeyError, match="known: k3"):
        kl_to_reference(LOGP, ref, MASK, estimator="k2")


# --- logits -------------------------------------------------------------------------


def test_entropy_of_a_uniform_distribution_is_log_v() -> None:
    # any constant logits: H = ln 8 = 2.0794415417
    logits = torch.full((2, 3, 8), 7.5)
    torch.testing.assert_close(entropy_from_logits(logits), torch.full((2, 3), 2.0794415417))


def test_entropy_of_a_skewed_and_a_one_hot_ish_distribution() -> None:
    # p = [0.7, 0.1, 0.1, 0.1]: H = 0.7 * 0.3566749439 + 3 * 0.1 * 2.3025850930 = 0.9404479887
    # logits [1000, 0, 0, 0]: H ~ 3 * e^-1000 * 1001 = 0 (and stays finite)
    logits = torch.tensor(
        [[[LN(0.7), LN(0.1), LN(0.1), LN(0.1)], [1000.0, 0.0, 0.0, 0.0]]], dtype=torch.float64
    )
    torch.testing.assert_close(
        entropy_from_logits(logits),
        torch.tensor([[0.9404479887, 0.0]], dtype=torch.float64),
        atol=1e-10,
        rtol=0,
    )


def test_token_log_probs_by_hand() -> None:
    # p = [0.7, 0.1, 0.1, 0.1] (logits shifted by +5, which changes nothing):
    # log p[0] = ln 0.7 = -0.3566749439, log p[3] = ln 0.1 = -2.3025850930
    row = [LN(0.7) + 5, LN(0.1) + 5, LN(0.1) + 5, LN(0.1) + 5]
    logits = torch.tensor([[row, row]], dtype=torch.float64)
    tokens = torch.tensor([[0, 3]])
    torch.testing.assert_close(
        token_log_probs(logits, tokens),
        torch.tensor([[-0.3566749439, -2.3025850930]], dtype=torch.float64),
        atol=1e-10,
        rtol=0,
    )


def test_sgt_nll_by_hand() -> None:
    # Two rescued responses, p = 0.7 then 0.1 on the first, 0.5 on the second (its second
    # position is padding and holds NaN): NLL = ln(1/0.7) + ln(1/0.1) + ln(1/0.5)
    # = 0.3566749439 + 2.3025850930 + 0.6931471806 = 3.3524072175 over 3 tokens.
    logp = torch.tensor([[LN(0.7), LN(0.1)], [LN(0.5), math.nan]], requires_grad=True)
    mask = torch.tensor([[1, 1], [1, 0]])
    nll = sft_nll_sum(logp, mask)
    torch.testing.assert_close(nll, torch.tensor(3.3524072175), atol=1e-6, rtol=0)
    (nll / mask.sum()).backward()  # the token mean, as the trainer takes it
    assert logp.grad is not None
    torch.testing.assert_close(
        logp.grad, torch.tensor([[-1 / 3, -1 / 3], [-1 / 3, 0.0]]), atol=1e-7, rtol=0
    )
    assert sft_nll_sum(logp, torch.zeros(2, 2, dtype=torch.bool)).item() == 0.0


def test_sgt_nll_is_the_registered_auxiliary_loss_nll() -> None:
    assert AUX_LOSSES.names() == ["nll"]
    assert AUX_LOSSES.get("nll") is sft_nll_sum


def test_sgt_nll_over_micro_batches_is_the_token_mean_of_the_whole_set() -> None:
    # The trainer sums each micro-batch's NLL and divides by the set's token count. Three
    # rescued responses in micro-batches of 2 and 1:
    #   [p = 0.5, 0.25] and [p = 0.125, padding (+inf)] | [p = 1.0, 0.5, 0.5]
    #   NLL sums: (ln 2 + ln 4) + ln 8 = 6 ln 2 | 0 + ln 2 + ln 2 = 2 ln 2
    #   token mean: 8 ln 2 / 6 tokens = 4/3 ln 2 = 0.9241962408
    # lambda_sgt = 0.1 times it: gradient -0.1/6 on every token, 0 on the padding.
    first = torch.tensor([[LN(0.5), LN(0.25), 0.0], [LN(0.125), math.inf, 0.0]])
    second = torch.tensor([[0.0, LN(0.5), LN(0.5)]])
    first_mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    second_mask = torch.tensor([[1, 1, 1]])
    first.requires_grad_()
    second.requires_grad_()
    tokens = int(first_mask.sum() + second_mask.sum())
    assert tokens == 6
    total = 0.0
    for logp, mask in ((first, first_mask), (second, second_mask)):
        nll_sum = sft_nll_sum(logp, mask)
        (0.1 * nll_sum / tokens).backward()
        total += nll_sum.item()
    assert total / tokens == pytest.approx(4 / 3 * LN(2))
    assert total / tokens == pytest.approx(0.9241962408)
    assert first.grad is not None and second.grad is not None
    torch.testing.assert_close(first.grad, -0.1 / 6 * first_mask.float())
    torch.testing.assert_close(second.grad, -0.1 / 6 * second_mask.float())
    # one set in one micro-batch gives the same token mean
    whole = torch.tensor([[LN(0.5), LN(0.25), 0.0], [LN(0.125), 0.0, 0.0], [0.0, LN(0.5), LN(0.5)]])
    whole_mask = torch.cat([first_mask, second_mask])
    assert (sft_nll_sum(whole, whole_mask) / tokens).item() == pytest.approx(total / tokens)


@pytest.mark.parametrize("chunk_tokens", [1, 3, 1024])
def test_chunked_logit_functions_match_log_softmax(chunk_tokens: int) -> None:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 17, generator=generator, dtype=torch.float64) * 4
    tokens = torch.randint(0, 17, (3, 5), generator=generator)
    log_probs = torch.log_softmax(logits, dim=-1)
    torch.testing.assert_close(
        token_log_probs(logits, tokens, chunk_tokens=chunk_tokens),
        log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1),
    )
    torch.testing.assert_close(
        entropy_from_logits(logits, chunk_tokens=chunk_tokens),
        -(log_probs.exp() * log_probs).sum(-1),
    )


def test_token_log_probs_are_differentiable_like_log_softmax() -> None:
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 4, 9, generator=generator, dtype=torch.float64, requires_grad=True)
    tokens = torch.randint(0, 9, (2, 4), generator=generator)
    token_log_probs(logits, tokens, chunk_tokens=3).sum().backward()
    reference = logits.detach().clone().requires_grad_()
    torch.log_softmax(reference, -1).gather(-1, tokens.unsqueeze(-1)).sum().backward()
    torch.testing.assert_close(logits.grad, reference.grad)


@pytest.mark.parametrize("chunk_tokens", [1, 3, 1024])
def test_fused_log_probs_and_entropy_match_log_softmax_with_their_gradients(
    chunk_tokens: int,
) -> None:
    # One log-softmax per chunk gives both, and a backward of its own (issue 23): values
    # and gradients (of either output, or both) are those of the plain formulas.
    generator = torch.Generator().manual_seed(5)
    logits = torch.randn(3, 4, 11, generator=generator, dtype=torch.float64) * 3
    tokens = torch.randint(0, 11, (3, 4), generator=generator)
    log_p = torch.log_softmax(logits, dim=-1)
    logp, entropy = token_log_probs_and_entropy(logits, tokens, chunk_tokens)
    torch.testing.assert_close(logp, log_p.gather(-1, tokens.unsqueeze(-1)).squeeze(-1))
    assert entropy is not None
    torch.testing.assert_close(entropy, -(log_p.exp() * log_p).sum(-1))
    assert token_log_probs_and_entropy(logits, tokens, with_entropy=False)[1] is None

    z = logits.clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x: token_log_probs_and_entropy(x, tokens, chunk_tokens), (z,)
    )
    assert torch.autograd.gradcheck(
        lambda x: token_log_probs_and_entropy(x, tokens, chunk_tokens)[1], (z,)
    )
    assert torch.autograd.gradcheck(lambda x: token_log_probs(x, tokens, chunk_tokens), (z,))


def test_fused_log_probs_in_float32_are_within_rounding_of_logsumexp() -> None:
    generator = torch.Generator().manual_seed(6)
    logits = torch.randn(8, 16, 512, generator=generator) * 4
    tokens = torch.randint(0, 512, (8, 16), generator=generator)
    logp, entropy = token_log_probs_and_entropy(logits, tokens)
    selected = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(logp, selected - torch.logsumexp(logits, -1), atol=1e-5, rtol=0)
    torch.testing.assert_close(entropy, entropy_from_logits(logits), atol=1e-5, rtol=0)


def test_half_precision_logits_are_computed_in_float32() -> None:
    logits = torch.full((1, 2, 8), 3.0, dtype=torch.bfloat16)
    tokens = torch.zeros(1, 2, dtype=torch.long)
    log_probs = token_log_probs(logits, tokens)
    entropy = entropy_from_logits(logits)
    assert log_probs.dtype == entropy.dtype == torch.float32
    # uniform over 8: log p = -ln 8 = -2.0794415417, H = ln 8
    torch.testing.assert_close(log_probs, torch.full((1, 2), -2.0794415417))
    torch.testing.assert_close(entropy, torch.full((1, 2), 2.0794415417))


# --- the grpo objective ---------------------------------------------------------------
# The surrogate example above, plus ref = logp + ln 2 on every token (k3 = 0.3068528194
# each, so kl_loss = 0.3068528194) and entropy [[1, 2, 3], [4, 5, masked]] (token-mean
# (1 + 2 + 3 + 4 + 5) / 5 = 3). kl_coef 0.1, entropy_coef 0.01:
#   loss = -0.62 + 0.1 * 0.3068528194 - 0.01 * 3 = -0.6193147181
# d loss / d logp = surrogate grad + 0.1 * (-e^ln2 + 1) / 5 = surrogate grad - 0.02 on
# each unmasked token.

REF_LOGP = LOGP + LN(2)
ENTROPY = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=torch.float64)
INPUT_FIELDS = {"mask", "advantages", "old_logp", "ref_logp", "token_weights"}


def _grpo(**overrides: object) -> ObjectiveOutput:
    """The ``grpo`` objective on the example; ``overrides`` name inputs or settings."""
    kwargs: dict[str, object] = {
        "logp": LOGP,
        "old_logp": OLD_LOGP,
        "ref_logp": REF_LOGP,
        "advantages": ADVANTAGES,
        "mask": MASK,
        "entropy": ENTROPY,
        "clip_eps": 0.2,
        "kl_coef": 0.1,
        "kl_clamp": 10.0,
        "entropy_coef": 0.01,
        "agg": "token-mean",
    }
    kwargs.update(overrides)
    logp, entropy = kwargs.pop("logp"), kwargs.pop("entropy")
    inputs = ObjectiveInputs(**{k: kwargs.pop(k) for k in INPUT_FIELDS & kwargs.keys()})  # type: ignore[arg-type]
    return grpo_loss(
        logp=logp,  # type: ignore[arg-type]
        entropy=entropy,  # type: ignore[arg-type]
        inputs=inputs,
        settings=ObjectiveSettings(**kwargs),  # type: ignore[arg-type]
    )


def _values(out: ObjectiveOutput) -> dict[str, float]:
    return {key: value.item() for key, value in out.metrics.items()}


def test_the_objectives_are_registered_by_name() -> None:
    assert OBJECTIVES.names() == ["grpo", "remix"]
    assert OBJECTIVES.get("grpo") is grpo_loss


def test_grpo_objective_by_hand() -> None:
    out = _grpo()
    assert out.loss.item() == pytest.approx(-0.6193147181)
    assert _values(out) == pytest.approx(
        {m.PG_LOSS: -0.62, m.KL_LOSS: 0.3068528194, m.ENTROPY: 3.0, m.CLIP_FRAC: 0.4}
    )
    assert list(out.metrics) == [m.PG_LOSS, m.KL_LOSS, m.ENTROPY, m.CLIP_FRAC]
    assert all(not value.requires_grad for value in out.metrics.values())
    assert out.token_stats == ()


def test_grpo_objective_gradients_by_hand() -> None:
    logp = LOGP.clone().requires_grad_()
    entropy = ENTROPY.clone().requires_grad_()
    _grpo(logp=logp, ref_logp=logp.detach() + LN(2), entropy=entropy).loss.backward()
    assert logp.grad is not None and entropy.grad is not None
    torch.testing.assert_close(logp.grad, SURROGATE_GRAD - 0.02 * MASK)
    # d loss / d entropy = -0.01 / 5 = -0.002 on each unmasked token
    torch.testing.assert_close(entropy.grad, -0.002 * MASK)


def test_without_old_log_probs_the_ratio_is_against_logp_itself() -> None:
    # The first and only pass: rho = 1, pg_loss = -0.8 (as on-policy above), and the
    # gradient is the plain policy gradient -A / 5 on every unmasked token.
    logp = OLD_LOGP.clone().requires_grad_()
    out = _grpo(logp=logp, old_logp=None, kl_coef=0.0, ref_logp=None, entropy_coef=0.0)
    assert out.metrics[m.PG_LOSS].item() == pytest.approx(-0.8)
    out.loss.backward()
    assert logp.grad is not None
    expected = -ADVANTAGES.unsqueeze(-1) / 5 * MASK
    torch.testing.assert_close(logp.grad, expected)


def test_grpo_objective_without_reference_or_entropy() -> None:
    out = _grpo(ref_logp=None, kl_coef=0.0, entropy=None, entropy_coef=0.0)
    assert out.loss.item() == pytest.approx(-0.62)
    assert out.metrics[m.KL_LOSS].item() == 0.0 and out.metrics[m.ENTROPY].item() == 0.0


def test_zero_coefficients_still_report_their_metrics() -> None:
    out = _grpo(kl_coef=0.0, entropy_coef=0.0)
    assert out.loss.item() == pytest.approx(-0.62)
    assert out.metrics[m.KL_LOSS].item() == pytest.approx(0.3068528194)
    assert out.metrics[m.ENTROPY].item() == pytest.approx(3.0)


def test_missing_inputs_for_nonzero_coefficients_are_refused() -> None:
    with pytest.raises(ValueError, match="ref_logp is None"):
        _grpo(ref_logp=None)
    with pytest.raises(ValueError, match="entropy is None"):
        _grpo(entropy=None)
    with pytest.raises(KeyError, match="known: k3"):
        _grpo(kl_estimator="k2")


def test_grpo_objective_seq_mean_token_mean_by_hand() -> None:
    # pg: -0.325 (above); kl: every sequence mean is 0.3068528194; entropy: sequence
    # means 2 and 4.5 -> 3.25. loss = -0.325 + 0.03068528194 - 0.0325 = -0.3268147181
    out = _grpo(agg="seq-mean-token-mean")
    assert out.loss.item() == pytest.approx(-0.3268147181)
    assert out.metrics[m.ENTROPY].item() == pytest.approx(3.25)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("junk", [math.nan, math.inf, -math.inf, 1e4])
def test_masked_positions_change_neither_the_objective_nor_gradients(agg: str, junk: float) -> None:
    def run(fill: float | None) -> tuple[list[float], Tensor, Tensor]:
        def dirty(x: Tensor) -> Tensor:
            x = x.detach().clone()
            return x if fill is None else torch.where(MASK.bool(), x, torch.tensor(fill))

        logp = dirty(LOGP).requires_grad_()
        entropy = dirty(ENTROPY).requires_grad_()
        out = _grpo(
            logp=logp,
            old_logp=dirty(OLD_LOGP),
            ref_logp=dirty(REF_LOGP),
            advantages=dirty(ADVANTAGES.unsqueeze(-1).expand(2, 3)),
            token_weights=dirty(torch.full((2, 3), 0.5, dtype=torch.float64)),
            entropy=entropy,
            agg=agg,
        )
        out.loss.backward()
        assert logp.grad is not None and entropy.grad is not None
        return [out.loss.item(), *_values(out).values()], logp.grad, entropy.grad

    clean_values, clean_logp_grad, clean_entropy_grad = run(None)
    values, logp_grad, entropy_grad = run(junk)
    assert values == clean_values
    assert torch.equal(logp_grad, clean_logp_grad)
    assert torch.equal(entropy_grad, clean_entropy_grad)


def test_objective_inputs_cut_rows_and_positions_as_views() -> None:
    inputs = ObjectiveInputs(
        mask=MASK, advantages=ADVANTAGES.unsqueeze(-1).expand(2, 3), old_logp=OLD_LOGP,
        replayed=torch.tensor([False, True]),
    )  # fmt: skip
    part = inputs.rows(slice(1, 2), 2)
    assert part.mask.shape == part.advantages.shape == part.old_logp.shape == (1, 2)  # type: ignore[union-attr]
    assert part.old_logp is not None and part.old_logp.data_ptr() == OLD_LOGP[1].data_ptr()
    assert part.replayed is not None and part.replayed.tolist() == [True]
    assert part.ref_logp is None and part.token_weights is None
    assert inputs.rows(slice(0, 2)).mask.shape == (2, 3)


def test_token_weights_scale_each_tokens_surrogate() -> None:
    # On-policy (rho = 1): per-token loss = -A. A = [2, -1]; weights 0.5 and 1 on the two
    # tokens of one sequence: token-mean = (-(2 * 0.5) + -(2 * 1)) / 2 = -1.5 for row 0,
    # and row 1 (weights 1, 1): (1 + 1) / 2; over all 4 tokens: (-1 - 2 + 1 + 1) / 4.
    logp = torch.zeros(2, 2)
    advantages = torch.tensor([2.0, -1.0])
    mask = torch.ones(2, 2)
    weights = torch.tensor([[0.5, 1.0], [1.0, 1.0]])
    loss = clipped_surrogate(logp, logp, advantages, mask, token_weights=weights).loss
    assert loss.item() == pytest.approx(-0.25)


def test_unit_token_weights_change_nothing() -> None:
    torch.manual_seed(0)
    logp, old = torch.randn(3, 4), torch.randn(3, 4)
    advantages, mask = torch.randn(3), (torch.rand(3, 4) > 0.3).float()
    plain = clipped_surrogate(logp, old, advantages, mask).loss
    weighted = clipped_surrogate(logp, old, advantages, mask, token_weights=torch.ones(3, 4)).loss
    assert torch.equal(plain, weighted)
