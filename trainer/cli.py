"""``python -m trainer``: run a pool, build the tiny zoo, validate a config, ship a spool,
evaluate a checkpoint.

    python -m trainer run --config CONFIG.json --run-dir DIR [--steps N] [--resume]
                          [--ingest-url URL --token TOKEN]
    python -m trainer zoo build [--zoo-dir DIR] [--seed S] [--force]
                                [--recipe default|complementary|all]
    python -m trainer validate --config CONFIG.json
    python -m trainer ship --run-dir DIR --ingest-url URL [--token TOKEN]
    python -m trainer eval --suite SUITE.json --checkpoint DIR [--policy NAME] --out FILE
                           [--ingest-url URL --token TOKEN] [--batch-size N] [--threads N]
    python -m trainer eval-suite synthetic --out DIR [--seed N] [--size N]

The run token may also come from the environment (``MRL_INGEST_TOKEN``), which keeps it
out of process listings; ``eval`` also reads the run's ``job/ingest-token``.

``eval`` scores one policy of one checkpoint (its step is the checkpoint's) on a suite
(:mod:`trainer.evals.evaluate`), writes ``--out``, spools the ``eval/<suite>/<task>/...``
points in ``<run_dir>/evals/`` and, given ``--ingest-url``, ships them.

Exit status of ``run``: 0 done; 2 a problem to fix before the run can start;
:data:`EXIT_UNSHIPPED` trained, but the web app did not take the whole spool (it was
down for ``--ship-timeout`` seconds at the end); a resume or ``ship`` sends the rest.
``eval`` exits likewise: 0, 2, or :data:`EXIT_UNSHIPPED` when the results are written and
spooled but the web app did not take them (run it again, or ``ship --run-dir
<run_dir>/evals``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

from trainer.config import ConfigError, RunConfig
from trainer.zoo import ZOO_RECIPES

EXIT_UNSHIPPED = 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainer", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="train the pool of CONFIG into DIR")
    run.add_argument("--config", type=Path, required=True, help="run config JSON")
    run.add_argument("--run-dir", type=Path, required=True, help="where spool and checkpoints go")
    run.add_argument("--steps", type=int, help="stop after this step (default: config.steps)")
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
        "(one skill each of addition, subtraction, multiplication), or all",
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
    evaluate.add_argument("--ingest-url", help="the web app's ingest endpoint for the run")
    evaluate.add_argument(
        "--token",
        help="the run token (default: $MRL_INGEST_TOKEN, then <run_dir>/job/ingest-token)",
    )
    evaluate.add_argument("--zoo-dir", type=Path, help="tiny zoo directory (default: $MRL_ZOO_DIR)")
    evaluate.add_argument("--batch-size", type=int, default=16, help="sequences per forward pass")
    evaluate.add_argument(
        "--max-new-tokens", type=int, help="generation limit (default: the policy's config)"
    )
    evaluate.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    evaluate.add_argument("--device", default="cpu", help="torch device (cpu, cuda, cuda:1)")
    evaluate.add_argument(
        "--ship-timeout", type=float, default=120.0, help="seconds to wait for the web app"
    )

    suite = commands.add_parser("eval-suite", help="write an evaluation suite the trainer builds")
    suite.add_argument("name", choices=("synthetic",), help="which suite")
    suite.add_argument("--out", type=Path, required=True, help="directory to write it into")
    suite.add_argument("--seed", type=int, default=0)
    suite.add_argument("--size", type=int, default=32, help="items per task")
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
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
    steps = config.steps if args.steps is None else args.steps
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
    from trainer.zoo import ALL_ZOO_IDS, build_zoo, default_zoo_dir

    zoo_dir = args.zoo_dir or default_zoo_dir()
    started = time.perf_counter()
    ids = ALL_ZOO_IDS if args.recipe == "all" else ZOO_RECIPES[args.recipe]
    built = build_zoo(zoo_dir, seed=args.seed, ids=ids, force=args.force)
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


def _eval(args: argparse.Namespace) -> int:
    import json

    import torch

    from trainer.evals import evaluate as ev
    from trainer.shipper import FatalShipError, Shipper
    from trainer.zoo import default_zoo_dir

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
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        suite = ev.load_suite(args.suite)
        items = ev.load_suite_items(suite)
        checkpoint = ev.open_checkpoint(args.checkpoint)
        policy = ev.pick_policy(checkpoint, args.policy)
        model, tokenizer = ev.load_policy_model(
            checkpoint, policy, zoo_dir=args.zoo_dir or default_zoo_dir(), device=args.device
        )
    except ev.EvalError as exc:
        raise UserFacingError(str(exc)) from exc
    config = checkpoint.policy_config(policy)
    started = time.perf_counter()
    results = ev.evaluate_suite(
        model,
        tokenizer,
        suite,
        items,
        chat_template=config.chat_template,
        max_new_tokens=args.max_new_tokens or config.max_new_tokens,
        batch_size=args.batch_size,
    )
    document = ev.results_json(suite, policy, checkpoint.step, results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    for name, task in document["tasks"].items():
        print(f"{suite.name}/{name}: accuracy {task['accuracy']:.3f} (n={task['n']})")
    print(f"{policy} at step {checkpoint.step} in {time.perf_counter() - started:.1f}s")
    spool = ev.spool_points(
        checkpoint.run_dir, ev.eval_points(suite, policy, checkpoint.step, results)
    )
    if not args.ingest_url:
        print(f"spooled in {spool}; ship with `python -m trainer ship --run-dir {spool}`")
        return 0
    token = ev.run_token(checkpoint.run_dir, args.token or os.environ.get("MRL_INGEST_TOKEN"))
    if not token:
        raise UserFacingError(
            "--ingest-url needs a run token (--token, MRL_INGEST_TOKEN or "
            f"{checkpoint.run_dir.joinpath(*ev.TOKEN_FILE)})"
        )
    shipper = Shipper(spool, args.ingest_url, token)
    try:
        done = shipper.drain(deadline=time.monotonic() + args.ship_timeout)
    except FatalShipError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNSHIPPED
    if not done:
        print(
            f"error: the web app did not take the results within {args.ship_timeout:g}s; they "
            f"are kept in {spool}: run the evaluation again or `python -m trainer ship`",
            file=sys.stderr,
        )
        return EXIT_UNSHIPPED
    print(f"shipped: {shipper.stats}")
    return 0


def _eval_suite(args: argparse.Namespace) -> int:
    from trainer.evals.synthetic import write_synthetic_suite

    if args.size < 1:
        raise UserFacingError(f"--size must be >= 1; got {args.size}")
    print(write_synthetic_suite(args.out, seed=args.seed, size=args.size))
    return 0
