"""Our GRPO step against TRL's GRPOTrainer: the same tiny policy, task, batch and settings.

    PYTHONPATH=. .venv/bin/python bench/vs_trl.py [--steps 8] [--threads 2]

TRL (and the datasets/accelerate it pulls in) lives only in the git-ignored bench venv
``.venv-bench-trl``, never in our requirements: where TRL cannot be imported, the script
makes that venv on first use (our pins from requirements.txt plus ``trl==1.16.0``) and
runs itself again under it. Both implementations run in that one venv and process, one
after the other, with the same ``torch.set_num_threads``.

(a) Timing: ``tiny-gpt2-unigram`` from the zoo, arithmetic levels 1-3, 16 prompts x G=8,
max_new_tokens 12, temperature 1.0, one optimizer step per batch; the same prompts at
every step on both sides. Median seconds per optimisation step, generation included,
over ``--steps`` steps after ``--warmup`` warm-up steps, and generated (response) tokens
per second of step time.

(b) Equivalence: one fixed batch (rollouts sampled by our engine from slightly perturbed
weights, so the KL to the unperturbed reference is not zero), the same advantages, old
log-probs = current (1 iteration). Our loss and gradient norm come from
``Policy.train_step`` (learning rate 0, so the step changes nothing); TRL's from
``GRPOTrainer.compute_loss`` plus ``backward`` on identical weights. Run on prompts of
equal token length (no left padding), on mixed lengths, and on mixed lengths with TRL's
model patched to get ``position_ids`` (TRL's training forward passes none, so its
left-padded prompts shift GPT-2's absolute positions; ``generate`` does not).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import torch

from trainer.config import GRPOConfig, PolicyConfig, TaskConfig
from trainer.core import ADVANTAGE_ESTIMATORS
from trainer.policy import LearnerBatch, Policy
from trainer.tasks import get_reward, make_task
from trainer.zoo import build_zoo, default_zoo_dir

REPO = Path(__file__).resolve().parents[1]
TRL_VENV = REPO / ".venv-bench-trl"
TRL_VERSION = "1.16.0"
# Ours, exactly as requirements.txt pins them, so both sides run on the same libraries.
SHARED_PINS = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "math-verify",
               "pyarrow")  # fmt: skip
POLICY = "tiny-gpt2-unigram"
PERTURB_STD = 0.02


def _policy(model_dir, args, *, lr: float) -> Policy:
    config = PolicyConfig(
        name="bench", model=f"zoo:{POLICY}", group_size=args.group, lr=lr,
        max_new_tokens=args.max_new_tokens, temperature=1.0,
        micro_batch_size=args.prompts * args.group,  # one forward per step, as TRL's
    )  # fmt: skip
    task = make_task(TaskConfig(levels=[1, 2, 3]), seed=0)
    return Policy(
        config, GRPOConfig(), model_dir=model_dir, tokenizer_dir=model_dir,
        reward_fn=get_reward(task.reward_name),
    )  # fmt: skip


def _trl_args(args, out_dir: str, *, max_steps: int, lr: float):
    from trl import GRPOConfig as TRLConfig

    ours = GRPOConfig()
    return TRLConfig(
        output_dir=out_dir,
        per_device_train_batch_size=args.prompts * args.group,
        gradient_accumulation_steps=1,  # one optimizer step per generated batch
        num_generations=args.group,
        num_iterations=1,
        max_completion_length=args.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=ours.weight_decay,
        optim="adamw_torch",
        max_grad_norm=ours.max_grad_norm,
        beta=ours.kl_coef,
        epsilon=ours.clip_eps,
        loss_type="dapo",  # sum over tokens / tokens of the whole batch = our token-mean
        scale_rewards="group",  # (r - mean) / (std + eps) per group
        entropy_coef=ours.entropy_coef,
        use_bias_correction_kl=False,  # TRL's default True multiplies the k3 term by the ratio
        disable_dropout=True,  # we train in eval mode (the zoo model has p=0 anyway)
        shuffle_dataset=False,  # the same prompts per step as ours
        max_steps=max_steps,
        use_cpu=True,
        bf16=False,
        fp16=False,
        report_to="none",
        logging_strategy="no",
        save_strategy="no",
        eval_strategy="no",
        disable_tqdm=True,
        log_completions=False,
        seed=0,
        dataloader_num_workers=0,
    )


def _trl_trainer(model_dir, args, out_dir: str, *, max_steps: int, lr: float, prompts, answers):
    from datasets import Dataset
    from trl import GRPOTrainer

    from trainer.models import load_causal_lm, load_tokenizer

    reward_fn = get_reward(make_task(TaskConfig(levels=[1, 2, 3]), seed=0).reward_name)
    generated_tokens: list[int] = []

    def reward(prompts, completions, answer, completion_ids, **_):
        generated_tokens.append(sum(len(ids) for ids in completion_ids))
        return reward_fn(list(prompts), list(completions), list(answer))

    dataset = Dataset.from_dict({"prompt": prompts, "answer": answers})
    trainer = GRPOTrainer(
        model=load_causal_lm(model_dir, "float32"),
        reward_funcs=reward,
        args=_trl_args(args, out_dir, max_steps=max_steps, lr=lr),
        train_dataset=dataset,
        processing_class=load_tokenizer(model_dir),
    )
    return trainer, generated_tokens


# --- (a) timing -----------------------------------------------------------------------


def time_ours(model_dir, args) -> dict:
    torch.manual_seed(0)
    policy = _policy(model_dir, args, lr=args.lr)
    task = make_task(TaskConfig(levels=[1, 2, 3]), seed=0)
    step_s, gen_s, tokens = [], [], []
    for step in range(1, args.warmup + args.steps + 1):
        started = time.perf_counter()
        rollouts = policy.rollout(task.train_batch(step, args.prompts))
        generated = time.perf_counter()
        policy.train_step(LearnerBatch.on_policy(rollouts, policy.advantages(rollouts)))
        finished = time.perf_counter()
        if step > args.warmup:
            step_s.append(finished - started)
            gen_s.append(generated - started)
            tokens.append(sum(len(ids) for ids in rollouts.batch.response_ids))
    return _summary(step_s, gen_s, tokens)


def time_trl(model_dir, args) -> dict:
    from transformers import TrainerCallback

    task = make_task(TaskConfig(levels=[1, 2, 3]), seed=0)
    policy = _policy(model_dir, args, lr=args.lr)  # for prompt formatting only
    steps = args.warmup + args.steps
    problems = [p for step in range(1, steps + 1) for p in task.train_batch(step, args.prompts)]
    prompts = policy.prompt_texts(problems)
    del policy

    ends: list[float] = []
    gen_s: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *_a, **_k):
            if not ends:
                ends.append(time.perf_counter())

        def on_step_end(self, *_a, **_k):
            ends.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as out_dir:
        torch.manual_seed(0)
        trainer, tokens = _trl_trainer(
            model_dir, args, out_dir, max_steps=steps, lr=args.lr,
            prompts=prompts, answers=[p.answer for p in problems],
        )  # fmt: skip
        trainer.add_callback(Clock())
        # Generation time, from TRL's own profiling hook around model.generate.
        original = trainer._generate_single_turn

        def timed(*a, **k):
            started = time.perf_counter()
            out = original(*a, **k)
            gen_s.append(time.perf_counter() - started)
            return out

        trainer._generate_single_turn = timed
        trainer.train()
    step_s = [b - a for a, b in itertools.pairwise(ends)]
    if len(step_s) != steps or len(tokens) != steps:
        raise RuntimeError(f"TRL ran {len(step_s)} steps / {len(tokens)} batches, want {steps}")
    keep = slice(args.warmup, None)
    return _summary(step_s[keep], gen_s[keep], tokens[keep])


def _summary(step_s, gen_s, tokens) -> dict:
    return {
        "step_s": statistics.median(step_s),
        "generate_s": statistics.median(gen_s),
        "train_s": statistics.median([s - g for s, g in zip(step_s, gen_s, strict=True)]),
        "tokens_per_s": statistics.median([t / s for t, s in zip(tokens, step_s, strict=True)]),
        "tokens_per_step": statistics.median(tokens),
        "steps": len(step_s),
    }


# --- (b) equivalence on one fixed batch -----------------------------------------------


def _fixed_problems(policy: Policy, args, *, equal_length: bool):
    task = make_task(TaskConfig(levels=[1, 2, 3]), seed=0)
    pool = task.train_batch(10_000, 50 * args.prompts)
    if not equal_length:
        return pool[: args.prompts]
    lengths = [len(policy.engine.encode_prompts([t])[0]) for t in policy.prompt_texts(pool)]
    common = statistics.mode(lengths)
    return [p for p, n in zip(pool, lengths, strict=True) if n == common][: args.prompts]


def _with_position_ids(model) -> None:
    """Patch ``model.forward`` to pass ``position_ids`` from the attention mask (as
    ``generate`` does); TRL's training forward passes none."""
    forward = model.forward

    def patched(*a, attention_mask=None, **k):
        if attention_mask is not None and "position_ids" not in k:
            k["position_ids"] = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        return forward(*a, attention_mask=attention_mask, **k)

    model.forward = patched


def equivalence(model_dir, args, *, equal_length: bool, position_ids: bool = False) -> dict:
    ours_cfg = GRPOConfig()
    policy = _policy(model_dir, args, lr=0.0)  # lr 0: train_step leaves the weights as they are
    reference_state = {k: v.clone() for k, v in policy.model.state_dict().items()}
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(PERTURB_STD * torch.randn(p.shape, generator=gen))
    policy_state = {k: v.clone() for k, v in policy.model.state_dict().items()}

    problems = _fixed_problems(policy, args, equal_length=equal_length)
    torch.manual_seed(2)
    rollouts = policy.rollout(problems)
    advantages = policy.advantages(rollouts)

    # Ours: the production path (old/ref log-probs, micro-batch, loss, clip_grad_norm_).
    metrics = policy.train_step(LearnerBatch.on_policy(rollouts, advantages))
    ours_loss = metrics["actor/pg_loss"] + ours_cfg.kl_coef * metrics["actor/kl_loss"]
    ours_grad = metrics["actor/grad_norm"]
    assert all(torch.equal(v, policy_state[k]) for k, v in policy.model.state_dict().items())

    # TRL: compute_loss + backward on the same weights, batch and advantages.
    with tempfile.TemporaryDirectory() as out_dir:
        trainer, _ = _trl_trainer(
            model_dir, args, out_dir, max_steps=1, lr=0.0, prompts=["x"], answers=["0"]
        )
        trainer.model.load_state_dict(policy_state)
        trainer.ref_model.load_state_dict(reference_state)
        if position_ids:
            _with_position_ids(trainer.model)
            _with_position_ids(trainer.ref_model)
        pad = policy.pad_id
        batch = rollouts.batch
        prompt = [torch.tensor(ids) for ids in batch.prompt_ids]
        completion = [torch.tensor(ids) for ids in batch.response_ids]
        width = max(len(t) for t in prompt)
        prompt_ids = torch.stack(
            [torch.cat([t.new_full((width - len(t),), pad), t]) for t in prompt]
        )
        prompt_mask = torch.stack(
            [torch.cat([torch.zeros(width - len(t)), torch.ones(len(t))]) for t in prompt]
        ).long()
        c_width = max(len(t) for t in completion)
        completion_ids = torch.stack(
            [torch.cat([t, t.new_full((c_width - len(t),), pad)]) for t in completion]
        )
        completion_mask = torch.stack(
            [torch.cat([torch.ones(len(t)), torch.zeros(c_width - len(t))]) for t in completion]
        ).long()
        with torch.no_grad():
            ref_logp = trainer._get_per_token_logps_and_entropies(
                trainer.ref_model,
                torch.cat([prompt_ids, completion_ids], 1),
                torch.cat([prompt_mask, completion_mask], 1),
                c_width,
            )[0]
        inputs = {
            "prompt_ids": prompt_ids,
            "prompt_mask": prompt_mask,
            "completion_ids": completion_ids,
            "completion_mask": completion_mask,
            "advantages": advantages.clone(),
            "ref_per_token_logps": ref_logp,
            "num_items_in_batch": completion_mask.sum(),
        }
        trainer.current_gradient_accumulation_steps = 1
        trainer.model.train()

        def trl_loss_and_grad() -> tuple[float, float]:
            trainer.model.zero_grad(set_to_none=True)
            loss = trainer.compute_loss(trainer.model, inputs)
            loss.backward()
            grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
            return float(loss.detach()), float(torch.nn.utils.get_total_norm(grads))

        trl_loss, trl_grad = trl_loss_and_grad()
        trainer.args.use_bias_correction_kl = True  # TRL's default, for the record
        _, trl_grad_default = trl_loss_and_grad()

        # TRL's advantages for the same rewards (its eps is 1e-4, ours 1e-6).
        from trl.trainer.utils import nanstd

        grouped = rollouts.rewards.view(-1, args.group)
        trl_adv = (grouped - grouped.mean(1, keepdim=True)) / (
            nanstd(grouped, dim=1)[:, None] + 1e-4
        )
        ours_adv = ADVANTAGE_ESTIMATORS.get("grpo")(grouped, eps=ours_cfg.adv_eps)

        # Why left padding matters: GPT-2 (absolute positions) without position_ids.
        model = trainer.ref_model
        one = prompt_ids[:1, width - len(prompt[0]) :]
        padded = torch.cat([one.new_full((1, 3), pad), one], 1)
        mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones_like(one)], 1)
        with torch.no_grad():
            a = model(input_ids=one).logits[0, -1]
            b = model(input_ids=padded, attention_mask=mask).logits[0, -1]
    return {
        "prompts": ("equal token length" if equal_length else "mixed lengths")
        + (", TRL given position_ids (patched)" if position_ids else ""),
        "padded_prompt_rows": int((prompt_mask == 0).any(1).sum()),
        "response_tokens": int(completion_mask.sum()),
        "nonzero_adv": int((advantages != 0).sum()),
        "ours_loss": ours_loss,
        "trl_loss": trl_loss,
        "loss_diff": abs(ours_loss - trl_loss),
        "ours_grad_norm": ours_grad,
        "trl_grad_norm": trl_grad,
        "grad_diff": abs(ours_grad - trl_grad),
        "trl_grad_norm_bias_correction_kl": trl_grad_default,
        "kl_loss": metrics["actor/kl_loss"],
        "adv_max_diff_eps": float((trl_adv - ours_adv).abs().max()),
        "left_pad_logit_diff": float((a - b).abs().max()),
    }


def pinned_requirements() -> list[str]:
    """``name==version`` for the SHARED_PINS, read from requirements.txt and the
    requirements files it includes."""
    pins: dict[str, str] = {}
    for path in REPO.glob("requirements*.txt"):
        for line in path.read_text().splitlines():
            name, sep, version = line.split("#")[0].strip().partition("==")
            if sep:
                pins[name.lower()] = f"{name}=={version.split(';')[0].strip()}"
    return [pins[name] for name in SHARED_PINS]


def run_under_trl_venv() -> None:
    """Return if TRL imports here; otherwise make ``.venv-bench-trl`` (once) and run this
    script again under it, with the same arguments."""
    try:
        import trl  # noqa: F401
    except ImportError:
        pass
    else:
        return
    python = TRL_VENV / "bin" / "python"
    probe = [str(python), "-c", "import trl, torch; print(trl.__version__)"]
    found = subprocess.run(probe, capture_output=True, text=True) if python.exists() else None
    if found is None or found.returncode != 0 or found.stdout.strip() != TRL_VERSION:
        print(f"creating {TRL_VENV} with trl=={TRL_VERSION} (once, a few minutes)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(TRL_VENV)], check=True)
        install = [*pinned_requirements(), f"trl=={TRL_VERSION}"]
        subprocess.run([str(python), "-m", "pip", "install", "-q", *install], check=True)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])
    )
    os.execv(python, [str(python), __file__, *sys.argv[1:]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=12)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--skip-timing", action="store_true")
    args = parser.parse_args()
    run_under_trl_venv()

    import transformers
    import trl

    torch.set_num_threads(args.threads)
    model_dir = build_zoo(default_zoo_dir(), ids=[POLICY])[POLICY]
    checks = [
        equivalence(model_dir, args, equal_length=True),
        equivalence(model_dir, args, equal_length=False),
        equivalence(model_dir, args, equal_length=False, position_ids=True),
    ]
    timing = {}
    if not args.skip_timing:
        timing["ours"] = time_ours(model_dir, args)
        timing["trl"] = time_trl(model_dir, args)
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    env = {
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "uptime": load,
    }
    print(json.dumps({"env": env, "equivalence": checks, "timing": timing}, indent=2))

    print("\n| fixed batch | loss ours | loss TRL | abs diff | grad norm ours | grad norm TRL "
          "| abs diff | TRL grad norm, default use_bias_correction_kl=True |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- |")  # fmt: skip
    for c in checks:
        print(
            f"| {c['prompts']} ({c['padded_prompt_rows']} left-padded rows) "
            f"| {c['ours_loss']:.8f} | {c['trl_loss']:.8f} | {c['loss_diff']:.2e} "
            f"| {c['ours_grad_norm']:.6f} | {c['trl_grad_norm']:.6f} | {c['grad_diff']:.2e} "
            f"| {c['trl_grad_norm_bias_correction_kl']:.6f} |"
        )
    if timing:
        o, t = timing["ours"], timing["trl"]
        print("\n| | step s | generate s | rest of step s | gen. tokens/step | tokens/s |")
        print("| --- | --- | --- | --- | --- | --- |")
        for name, r in (("ours", o), ("TRL", t)):
            print(
                f"| {name} | {r['step_s']:.3f} | {r['generate_s']:.3f} | {r['train_s']:.3f} "
                f"| {r['tokens_per_step']:.0f} | {r['tokens_per_s']:,.0f} |"
            )
        print(
            f"| ours / TRL | {o['step_s'] / t['step_s']:.2f} | "
            f"{o['generate_s'] / t['generate_s']:.2f} | {o['train_s'] / t['train_s']:.2f} | "
            f"| {o['tokens_per_s'] / t['tokens_per_s']:.2f} |"
        )


if __name__ == "__main__":
    main()
