"""Why weak B's ``overflow`` gap stayed closed on the systematic-gap pool (issue 45).

    PYTHONPATH=. .venv/bin/python bench/gap_probe.py [--zoo-dir DIR] [--seed 0] \\
        [--val-size 400] [--group 8] [--sgt-steps 60]

On the gap zoo (``python -m trainer zoo build --recipe gap``; built into ``--zoo-dir``
first if missing), on the validation problems of one slice (the validation set
``examples/gap.json`` runs: ``AdditionSlicesTask(seed, val_size)``, ``val_size // 4`` a
slice), it prints markdown tables of:

1. how the correct answer and the answer the weak policy was taught instead tokenize in
   its tokenizer: ``tiny-gpt2-unigram-nohundreds`` on ``overflow`` (``63+52``:
   ``\\boxed{115}`` against ``\\boxed{15}``) and, for contrast,
   ``tiny-qwen-bpe-nocarry`` on ``carry`` (``47+38``: ``\\boxed{85}`` against
   ``\\boxed{75}``);
2. the summed log-prob (nats) of each response (its EOS included) after the policy's own
   chat-formatted prompt, as the trainer scores a response
   (:meth:`trainer.policy.Policy.response_logprobs` at temperature 1, the temperature of
   SGT's NLL and of these policies' sampling);
3. per token of the correct response, where the probability mass goes: the target's
   probability, the policy's top-1 token and its probability, ``P(})`` and
   ``P(EOS)``, by the token's role (``digit 1/3`` is the first of three answer digits);
4. the rescue path of SGT for the weak policy: both peers' rollouts (G at temperature 1)
   on the same prompts, the rescue set :func:`trainer.regimes.sgt.regime.rescue_set`
   chooses where the weak policy failed all G, the chosen texts retokenized into its
   tokens by THL's text path (:func:`trainer.thl.encode_text`), whether those ids are
   the ones its own tokenizer gives the correct answer, and the token-mean NLL
   ``sgt/nll`` that SGT's auxiliary term computes on them (:meth:`Policy.train_step` on a
   batch of that term alone, at learning rate 0: the weights do not move).

Those are the built warm-starts. With ``--sgt-steps N`` it then runs ``examples/gap.json``
under SGT (seed ``--seed``, N steps x ``--sgt-prompts``, a checkpoint every third of the
steps) and gives 2 and 3 again at each checkpoint: greedy accuracy on the slice, the
summed log-probs, each answer token's log-prob, with the ``sgt/nll`` and rescue-set size
the run logged in between.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from trainer.batch import AuxTerm, LearnerBatch
from trainer.checkpoint import checkpoint_dir, load_weights
from trainer.config import GRPOConfig, PolicyConfig
from trainer.policy import Policy
from trainer.regimes.sgt import NLL, RESCUE_SET_SIZE
from trainer.regimes.sgt.regime import (
    learner_prompt_ids,
    rescue_set,
    shortest_successes,
    translate,
)
from trainer.tasks import Problem, get_reward
from trainer.tasks.addition_slices import AdditionSlicesTask, dropped_hundreds
from trainer.tasks.arithmetic import boxed
from trainer.zoo import ZOO_RECIPES, build_zoo, resolve_model_source
from trainer.zoo.sft import dropped_carry

REPO = Path(__file__).resolve().parents[1]
DEFAULT_ZOO = REPO / "var" / "test" / "zoo"
WEAK_B = "tiny-gpt2-unigram-nohundreds"
WEAK_A = "tiny-qwen-bpe-nocarry"
STRONG = "tiny-llama-char-sum"
POOL_NAMES = {STRONG: "llama-sum", WEAK_A: "qwen-nocarry", WEAK_B: "gpt2-nohundreds"}
"""The policies' names in ``examples/gap.json`` (the pool's rank order)."""
MAX_NEW_TOKENS = 12
"""``examples/gap.json``'s response limit."""
OPERANDS = re.compile(r"Compute (\d+)\+(\d+)\.")


@dataclass(frozen=True)
class Probe:
    """One weak policy on its gap slice: the answer it was taught instead of the right one."""

    zoo_id: str
    slice_name: str
    taught: Callable[[int, int], int]
    """``(a, b) -> `` the answer its warm-start demonstrations wrote for ``a+b``."""
    taught_label: str


PROBES = (
    Probe(WEAK_B, "overflow", dropped_hundreds, "hundreds dropped"),
    Probe(WEAK_A, "carry", lambda a, b: dropped_carry(f"{a}+{b}", a + b), "ones carry dropped"),
)


@dataclass(frozen=True)
class TokenView:
    """One response token under the policy: its role, its text, and the next-token
    distribution that predicts it (temperature 1)."""

    role: str
    token: str
    logp: float
    top_token: str
    p_top: float
    p_close: float
    """P(``}``): the box closes here."""
    p_eos: float


@dataclass(frozen=True)
class Scored:
    """A response's tokens and their views; ``total`` is the summed log-prob, EOS included."""

    tokens: list[str]
    views: list[TokenView]

    @property
    def total(self) -> float:
        return sum(view.logp for view in self.views)


def operands(problem: Problem) -> tuple[int, int]:
    """``(a, b)`` of ``Compute a+b.``."""
    match = OPERANDS.fullmatch(problem.prompt)
    if match is None:
        raise ValueError(f"not a two-term addition prompt: {problem.prompt!r}")
    return int(match[1]), int(match[2])


def slice_problems(seed: int, val_size: int, slice_name: str) -> list[Problem]:
    """The run's validation problems of ``slice_name`` (``examples/gap.json``'s set)."""
    return [
        p for p in AdditionSlicesTask(seed=seed, val_size=val_size).validation()
        if p.skill == slice_name
    ]  # fmt: skip


def load_policy(zoo_dir: Path, zoo_id: str, group: int) -> Policy:
    """A zoo policy as the trainer makes it (``examples/gap.json``'s settings: math
    reward, temperature 1, ``max_new_tokens`` 12, no system prompt or examples)."""
    model_dir = resolve_model_source(f"zoo:{zoo_id}", zoo_dir)
    config = PolicyConfig(
        name=POOL_NAMES[zoo_id],
        model=str(model_dir),
        group_size=group,
        max_new_tokens=MAX_NEW_TOKENS,
    )
    return Policy(
        config,
        GRPOConfig(),
        model_dir=model_dir,
        tokenizer_dir=model_dir,
        reward_fn=get_reward("math"),
    )


def roles(tokens: Sequence[str], eos: str) -> list[str]:
    """Each response token's role: ``digit i/n`` for the answer's digits (one character
    each in the three gap tokenizers), ``EOS``, else the token itself."""
    digits = [i for i, token in enumerate(tokens) if token.isdigit()]
    labels = []
    for index, token in enumerate(tokens):
        if index in digits:
            labels.append(f"digit {digits.index(index) + 1}/{len(digits)}")
        elif token == eos:
            labels.append("EOS")
        else:
            labels.append(token)
    return labels


def role_order(role: str, first_seen: dict[str, int]) -> tuple[int, ...]:
    """Where a role's row goes in a table: the ``\\boxed{`` prefix in response order,
    then the digits (by answer length, then place), then ``}`` and EOS."""
    if role.startswith("digit "):
        place, count = role.removeprefix("digit ").split("/")
        return (1, int(count), int(place))
    if role in ("}", "EOS"):
        return (2 if role == "}" else 3,)
    return (0, first_seen[role])


@torch.no_grad()
def score(policy: Policy, prompt_ids: list[int], response_ids: list[int]) -> Scored:
    """The response's tokens after ``prompt_ids`` under ``policy`` at temperature 1: one
    forward of the whole sequence, each response position's next-token distribution.
    The target log-probs are checked against the trainer's own scoring
    (:meth:`Policy.response_logprobs`)."""
    tokenizer = policy.tokenizer
    sequence = torch.tensor([prompt_ids + response_ids])
    logits = policy.model(input_ids=sequence, use_cache=False).logits[0].float()
    start = len(prompt_ids) - 1
    log_probs = torch.log_softmax(logits[start : start + len(response_ids)], dim=-1)
    trainer_logp = policy.response_logprobs([prompt_ids], [response_ids])[0]
    tokens = tokenizer.convert_ids_to_tokens(response_ids)
    close_id = tokenizer.convert_tokens_to_ids("}")
    views = []
    for position, (token_id, label) in enumerate(
        zip(response_ids, roles(tokens, tokenizer.eos_token), strict=True)
    ):
        row = log_probs[position]
        logp = float(row[token_id])
        if abs(logp - trainer_logp[position]) > 1e-3:
            raise AssertionError(
                f"log-prob {logp} differs from Policy.response_logprobs' "
                f"{trainer_logp[position]} at {position}"
            )
        top = int(row.argmax())
        views.append(
            TokenView(
                role=label,
                token=tokens[position],
                logp=logp,
                top_token=tokenizer.convert_ids_to_tokens(top),
                p_top=float(row[top].exp()),
                p_close=float(row[close_id].exp()),
                p_eos=float(row[tokenizer.eos_token_id].exp()),
            )
        )
    return Scored(tokens, views)


def prompt_ids_of(policy: Policy, problems: Sequence[Problem]) -> list[list[int]]:
    """Each problem's chat-formatted prompt ids, as the rollout engine encodes them."""
    return policy.engine.encode_prompts(policy.prompt_texts(problems))


def _mean(values: Sequence[float]) -> float:
    return statistics.mean(values) if values else float("nan")


def _span(values: Sequence[float]) -> str:
    return f"{_mean(values):.2f} [{min(values):.2f}, {max(values):.2f}]"


def tokenization_table(policy: Policy, probe: Probe, problems: Sequence[Problem]) -> None:
    """Example problems' correct and taught responses in the policy's tokens, and how
    many tokens each takes over all the problems."""
    print(f"\n#### {policy.name} on `{probe.slice_name}`: the responses in its tokens\n")
    print(f"| problem | correct | tokens | {probe.taught_label} | tokens |")
    print("| --- | --- | --- | --- | --- |")
    for problem in problems[:4]:
        a, b = operands(problem)
        cells = [f"{a}+{b}"]
        for answer in (a + b, probe.taught(a, b)):
            ids = policy.encode_response(boxed(answer))
            shown = " ".join(f"`{t}`" for t in policy.tokenizer.convert_ids_to_tokens(ids))
            cells += [f"`{boxed(answer)}`", shown]
        print("| " + " | ".join(cells) + " |")
    lengths: dict[str, Counter[int]] = {"correct": Counter(), probe.taught_label: Counter()}
    for problem in problems:
        a, b = operands(problem)
        lengths["correct"][len(policy.encode_response(boxed(a + b)))] += 1
        lengths[probe.taught_label][len(policy.encode_response(boxed(probe.taught(a, b))))] += 1
    counts = "; ".join(
        f"{name}: " + ", ".join(f"{n} tokens x {c}" for n, c in sorted(counter.items()))
        for name, counter in lengths.items()
    )
    print(f"\nResponse lengths (EOS included) over the {len(problems)} problems: {counts}.")


def likelihood_tables(policy: Policy, probe: Probe, problems: Sequence[Problem]) -> list[Scored]:
    """Summed log-probs of the correct and the taught response per problem, and the
    per-role view of the correct responses; returns the correct responses' scores."""
    prompts = prompt_ids_of(policy, problems)
    correct: list[Scored] = []
    taught: list[Scored] = []
    for problem, prompt in zip(problems, prompts, strict=True):
        a, b = operands(problem)
        correct.append(score(policy, prompt, policy.encode_response(boxed(a + b))))
        taught.append(score(policy, prompt, policy.encode_response(boxed(probe.taught(a, b)))))
    gaps = [c.total - t.total for c, t in zip(correct, taught, strict=True)]
    print(f"\n#### {policy.name} on `{probe.slice_name}`: summed log-prob of each response\n")
    print(f"{len(problems)} validation problems; mean [min, max] over problems, nats, after")
    print("the policy's own prompt, EOS included (Policy.response_logprobs, T = 1).\n")
    print("| response | sum log-prob | answer tokens' share of it | P(response) > P(other) |")
    print("| --- | --- | --- | --- |")
    for label, scored, sign in (("correct", correct, 1), (probe.taught_label, taught, -1)):
        share = [_answer_share(s) for s in scored]
        wins = sum(g * sign > 0 for g in gaps)
        print(
            f"| {label} | {_span([s.total for s in scored])} | {_mean(share):.3f} | "
            f"{wins} / {len(gaps)} |"
        )
    print(f"| correct - {probe.taught_label} | {_span(gaps)} | | |")
    _role_table(policy, probe, "correct", correct)
    _role_table(policy, probe, probe.taught_label, taught)
    return correct


def _answer_share(scored: Scored) -> float:
    """The share of the response's NLL on its digits, ``}`` and EOS (the rest is the
    ``\\boxed{`` prefix)."""
    answer = sum(
        v.logp for v in scored.views if v.role.startswith("digit") or v.role in ("}", "EOS")
    )
    return answer / scored.total if scored.total else 0.0


def _role_table(policy: Policy, probe: Probe, label: str, scored: Sequence[Scored]) -> None:
    """Per role of a response's tokens (over the problems whose response has it): mean
    log-prob of the target, the most frequent top-1 token and how often, mean P(top-1),
    mean P(}) and P(EOS)."""
    by_role: dict[str, list[TokenView]] = {}
    first_seen: dict[str, int] = {}
    for response in scored:
        for index, view in enumerate(response.views):
            by_role.setdefault(view.role, []).append(view)
            first_seen[view.role] = min(first_seen.get(view.role, index), index)
    print(f"\n{policy.name} on `{probe.slice_name}`, {label} response, per token (T = 1):\n")
    print(
        "| role | n | log-prob (mean [min, max]) | top-1 token (share) | P(top-1) | P(}) | P(EOS) |"
    )
    print("| --- | ---: | --- | --- | ---: | ---: | ---: |")
    for role, views in sorted(by_role.items(), key=lambda item: role_order(item[0], first_seen)):
        top, count = Counter(v.top_token for v in views).most_common(1)[0]
        print(
            f"| `{role}` | {len(views)} | {_span([v.logp for v in views])} | "
            f"`{top}` ({count / len(views):.2f}) | {_mean([v.p_top for v in views]):.3f} | "
            f"{_mean([v.p_close for v in views]):.3f} | {_mean([v.p_eos for v in views]):.3f} |"
        )


def rescue_table(
    learner: Policy, peers: Sequence[Policy], problems: Sequence[Problem], seed: int
) -> None:
    """SGT's rescue path for ``learner`` on ``problems`` in one step's worth of rollouts:
    who succeeds, what the rescue set holds, the rescues in the learner's tokens, and
    the NLL SGT's auxiliary term computes on them."""
    torch.manual_seed(seed)
    own = learner.rollout(list(problems))
    group = own.group_size
    print(f"\n#### SGT's rescues for {learner.name} on these problems (G = {group}, T = 1)\n")
    print("| policy | successes / samples | prompts with a success | greedy accuracy |")
    print("| --- | --- | --- | --- |")
    published = {}
    for policy, rollouts in [(learner, own), *((p, p.rollout(list(problems))) for p in peers)]:
        solved = sum(
            any(rollouts.successes[i] for i in rollouts.rows_of(k)) for k in range(len(problems))
        )
        greedy = policy.validate(list(problems))
        print(
            f"| {policy.name} | {int(rollouts.successes.sum())} / {len(rollouts.rewards)} | "
            f"{solved} / {len(problems)} | {greedy:.2f} |"
        )
        if policy is not learner:
            published[policy.name] = shortest_successes(rollouts, k=1)
    ranks = {name: rank for rank, name in enumerate(POOL_NAMES.values())}
    rescues, failed_all = rescue_set(own, published, k=1, ranks=ranks)
    encoded = translate(rescues, learner.tokenizer)
    problem_of = {p.id: p for p in problems}
    same = sum(
        e.target_ids == learner.encode_response(boxed(problem_of[r.prompt_id].answer))
        for r, e in zip(rescues, encoded, strict=True)
    )
    sources = Counter(r.source for r in rescues)
    print(
        f"\nThe learner failed all {group} on {failed_all} of {len(problems)} prompts; the "
        f"rescue set (k_sgt = 1) holds {len(rescues)} ({dict(sources)}), "
        f"{sum(r.finished for r in rescues)} ended with EOS."
    )
    print(
        f"{same} of {len(rescues)} retokenized rescues are exactly the learner's own "
        "tokenization of the correct `\\boxed{answer}` + EOS."
    )
    for rescue, enc in list(zip(rescues, encoded, strict=True))[:3]:
        shown = " ".join(f"`{t}`" for t in learner.tokenizer.convert_ids_to_tokens(enc.target_ids))
        print(f"- from {rescue.source}: `{rescue.text}` -> {shown}")
    if not rescues:
        return
    term = AuxTerm(
        loss="nll",
        prompt_ids=[learner_prompt_ids(own, r.prompt_index) for r in rescues],
        response_ids=[e.target_ids for e in encoded],
        coef=0.1,
        metric=NLL,
    )
    token_mean = aux_nll(learner, term)
    sums = [-sum(logp) for logp in learner.response_logprobs(term.prompt_ids, term.response_ids)]
    tokens = sum(len(ids) for ids in term.response_ids)
    print(
        f"\nSGT's auxiliary NLL on this rescue set, through `Policy.train_step` at learning rate 0 "
        f"(`{NLL}`, token-mean over {tokens} tokens): **{token_mean:.3f} nats/token**; "
        f"per rescue, summed: {_span(sums)} nats; sum over all / tokens = "
        f"{sum(sums) / tokens:.3f}. With lambda_sgt 0.1 the term adds "
        f"{0.1 * token_mean:.3f} to the step's loss."
    )


def aux_nll(policy: Policy, term: AuxTerm) -> float:
    """The value SGT logs as ``sgt/nll`` for ``term``: the policy's own update of a batch
    that holds the term alone (:meth:`Policy.train_step`), at learning rate 0, so the
    weights stay as they were (checked)."""
    before = {name: tensor.clone() for name, tensor in policy.model.state_dict().items()}
    rates = [group["lr"] for group in policy.optimizer.param_groups]
    for group in policy.optimizer.param_groups:
        group["lr"] = 0.0
    try:
        metrics = policy.train_step(LearnerBatch([], [], torch.zeros(0), aux_terms=[term]))
    finally:
        for group, rate in zip(policy.optimizer.param_groups, rates, strict=True):
            group["lr"] = rate
    after = policy.model.state_dict()
    if any(not torch.equal(tensor, after[name]) for name, tensor in before.items()):
        raise AssertionError("the NLL probe changed the weights")
    return metrics[term.metric]


def run_sgt(zoo_dir: Path, seed: int, steps: int, prompts: int, work: Path) -> Path:
    """One SGT run of ``examples/gap.json`` (its pool, lr, G, lambda_sgt) at ``seed``,
    ``steps`` x ``prompts``, every third of the steps checkpointed and kept; its run
    directory."""
    config = json.loads((REPO / "examples" / "gap.json").read_text())
    config |= {
        "name": "gap-probe-sgt", "seed": seed, "steps": steps, "prompts_per_step": prompts,
        "val_every": steps, "checkpoint_every": max(steps // 3, 1),
        "checkpoint_keep_last": None,
    }  # fmt: skip
    config_path = work / "sgt.json"
    config_path.write_text(json.dumps(config))
    run_dir = work / "sgt"
    subprocess.run(
        [sys.executable, "-m", "trainer", "run", "--config", str(config_path),
         "--run-dir", str(run_dir)],
        cwd=REPO, check=True, capture_output=True,
        env={**os.environ, "MRL_ZOO_DIR": str(zoo_dir)},
    )  # fmt: skip
    return run_dir


def step_curves(run_dir: Path, keys: Sequence[str]) -> dict[tuple[str, str], dict[int, float]]:
    """``(policy, key) -> step -> value`` of ``keys`` in the run's ``metrics.jsonl``."""
    curves: dict[tuple[str, str], dict[int, float]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        point = json.loads(line)
        if point["key"] in keys:
            curves.setdefault((point["policy"], point["key"]), {})[point["step"]] = float(
                point["value"]
            )
    return curves


def checkpoint_table(zoo_dir: Path, run_dir: Path, seed: int, val_size: int, group: int) -> None:
    """Each probe's policy at step 0 and at every kept checkpoint of ``run_dir``: greedy
    accuracy on its gap slice, the summed log-prob of the correct and the taught
    response, the mean log-prob of each answer token of the correct one, and the SGT
    NLL and rescue-set size it logged over the steps since the previous row."""
    steps = sorted(
        int(path.name.removeprefix("step_")) for path in (run_dir / "checkpoints").glob("step_*")
    )
    curves = step_curves(run_dir, (NLL, RESCUE_SET_SIZE))
    print("\n#### Under SGT: the same numbers at the run's checkpoints\n")
    print("| policy | slice | step | greedy acc | sum log-prob correct | sum log-prob taught |")
    print("| --- | --- | ---: | ---: | --- | --- |")
    answer_rows: list[str] = []
    for probe in PROBES:
        problems = slice_problems(seed, val_size, probe.slice_name)
        policy = load_policy(zoo_dir, probe.zoo_id, group)
        prompts = prompt_ids_of(policy, problems)
        previous = 0
        for step in [0, *steps]:
            if step:
                load_weights(
                    checkpoint_dir(run_dir, step) / policy.name / "model.safetensors", policy.model
                )
            correct, taught = [], []
            for problem, prompt in zip(problems, prompts, strict=True):
                a, b = operands(problem)
                correct.append(score(policy, prompt, policy.encode_response(boxed(a + b))))
                taught.append(
                    score(policy, prompt, policy.encode_response(boxed(probe.taught(a, b))))
                )
            accuracy = policy.validate(problems)
            print(
                f"| {policy.name} | {probe.slice_name} | {step} | {accuracy:.2f} | "
                f"{_span([c.total for c in correct])} | {_span([t.total for t in taught])} |"
            )
            digits = {}
            for response in correct:
                for view in response.views:
                    if view.role.startswith("digit") or view.role == "}":
                        digits.setdefault(view.role, []).append(view.logp)
            nll, rescues = (
                _mean(
                    [
                        v
                        for s, v in curves.get((policy.name, key), {}).items()
                        if previous < s <= step
                    ]
                )
                for key in (NLL, RESCUE_SET_SIZE)
            )
            answer_rows.append(
                f"| {policy.name} | {step} | "
                + " / ".join(f"{_mean(values):.2f}" for values in digits.values())
                + (f" | {nll:.3f} | {rescues:.1f} |" if step else " | | |")
            )
            previous = step
    print("\nMean log-prob of each token of the correct answer (digits, then `}`), and")
    print("the SGT NLL (`sgt/nll`, token-mean) and rescue-set size it logged, mean over the")
    print("steps since the previous row:\n")
    print("| policy | step | answer digits / `}` | sgt/nll | rescues / step |")
    print("| --- | ---: | --- | ---: | ---: |")
    for row in answer_rows:
        print(row)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--zoo-dir", type=Path, default=DEFAULT_ZOO)
    parser.add_argument("--seed", type=int, default=0, help="the validation set's seed")
    parser.add_argument("--val-size", type=int, default=400, help="4 slices: 100 a slice")
    parser.add_argument("--group", type=int, default=8, help="G of the rescue rollouts")
    parser.add_argument(
        "--sgt-steps",
        type=int,
        default=0,
        help="also run examples/gap.json under SGT for this many steps (60: the "
        "benchmark's) and probe its checkpoints; 0: do not",
    )
    parser.add_argument("--sgt-prompts", type=int, default=16)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    build_zoo(args.zoo_dir, ids=ZOO_RECIPES["gap"], log=lambda line: print(line, file=sys.stderr))
    policies = {zoo_id: load_policy(args.zoo_dir, zoo_id, args.group) for zoo_id in POOL_NAMES}
    for probe in PROBES:
        policy = policies[probe.zoo_id]
        problems = slice_problems(args.seed, args.val_size, probe.slice_name)
        print(f"\n### {policy.name} ({probe.zoo_id}) on `{probe.slice_name}`")
        tokenization_table(policy, probe, problems)
        likelihood_tables(policy, probe, problems)
        peers = [p for zoo_id, p in policies.items() if zoo_id != probe.zoo_id]
        rescue_table(policy, peers, problems, args.seed)
    if args.sgt_steps:
        with tempfile.TemporaryDirectory() as work:
            run_started = time.perf_counter()
            run_dir = run_sgt(args.zoo_dir, args.seed, args.sgt_steps, args.sgt_prompts, Path(work))
            print(
                f"\nSGT run: examples/gap.json, seed {args.seed}, {args.sgt_steps} steps x "
                f"{args.sgt_prompts} prompts, {time.perf_counter() - run_started:.0f} s",
                file=sys.stderr,
            )
            checkpoint_table(args.zoo_dir, run_dir, args.seed, args.val_size, args.group)
    print(f"\ntotal {time.perf_counter() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
