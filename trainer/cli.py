"""``python -m trainer``: run a pool, build the tiny zoo, validate a config, ship a spool.

    python -m trainer run --config CONFIG.json --run-dir DIR [--steps N] [--resume]
                          [--ingest-url URL --token TOKEN]
    python -m trainer zoo build [--zoo-dir DIR] [--seed S] [--force]
                                [--recipe default|complementary|all]
    python -m trainer validate --config CONFIG.json
    python -m trainer ship --run-dir DIR --ingest-url URL [--token TOKEN]

The run token may also come from the environment (``MRL_INGEST_TOKEN``), which keeps it
out of process listings.

Exit status of ``run``: 0 done; 2 a problem to fix before the run can start;
:data:`EXIT_UNSHIPPED` trained, but the web app did not take the whole spool (it was
down for ``--ship-timeout`` seconds at the end); a resume or ``ship`` sends the rest.
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
