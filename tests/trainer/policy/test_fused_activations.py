"""``fuse_activations``: GPT-2's ``gelu_new`` as torch's fused tanh-GELU kernel, the same
function to float rounding (issue 23); the policy's model and reference both get it."""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from transformers.activations import GELUTanh, NewGELUActivation

from tests.trainer.zoo_policy import zoo_policy
from trainer.config import RunConfig
from trainer.models import fuse_activations, load_causal_lm


def _count(model: torch.nn.Module, kind: type) -> int:
    return sum(type(module) is kind for module in model.modules())


def test_gpt2_gelu_new_becomes_the_fused_kernel_with_the_same_outputs_and_gradients(
    zoo_dir: Path,
) -> None:
    model = load_causal_lm(zoo_dir / "tiny-gpt2-unigram", "float32").eval()
    fused = copy.deepcopy(model)
    layers = model.config.n_layer
    assert _count(model, NewGELUActivation) == layers
    assert fuse_activations(fused) == layers
    assert _count(fused, NewGELUActivation) == 0 and _count(fused, GELUTanh) == layers
    assert fuse_activations(fused) == 0  # nothing left to replace

    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, model.config.vocab_size, (4, 20), generator=generator)
    outputs = []
    for candidate in (model, fused):
        logits = candidate(input_ids=input_ids, use_cache=False).logits
        torch.log_softmax(logits, -1)[..., 5].sum().backward()
        grads = [p.grad.clone() for p in candidate.parameters() if p.grad is not None]
        outputs.append((logits.detach(), grads))
    (logits, grads), (fused_logits, fused_grads) = outputs
    torch.testing.assert_close(fused_logits, logits, atol=1e-5, rtol=1e-5)
    assert len(grads) == len(fused_grads)
    for got, want in zip(fused_grads, grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_models_without_gelu_new_are_left_as_they_are(zoo_dir: Path) -> None:
    for zoo_id in ("tiny-llama-char", "tiny-qwen-bpe"):
        assert fuse_activations(load_causal_lm(zoo_dir / zoo_id, "float32")) == 0


def test_the_policy_and_its_reference_run_the_fused_kernel(zoo_dir: Path) -> None:
    policy = zoo_policy(
        "a",
        "tiny-gpt2-unigram",
        zoo_dir,
        RunConfig.from_dict({"pool": [{"name": "a", "model": "zoo:tiny-gpt2-unigram"}]}),
    )
    for model in (policy.model, policy.reference):
        assert _count(model, NewGELUActivation) == 0 and _count(model, GELUTanh) > 0
