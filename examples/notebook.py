# %% [markdown]
# # The demo's regime comparison, from a notebook
#
# Pulls the demo's runs (`make demo`: the systematic-gap pool under `standalone` and
# `sgt`) from a running lab with the Python client, and draws validation reward against
# response tokens, one panel per policy, one line per regime (the mean over seeds, with a
# +-std band where there are several). Run it as a script or cell by cell (`# %%` cells:
# VS Code, Jupytext, Spyder):
#
#     pip install './client[plot]'        # or: the dev venv has it (requirements-dev.txt)
#     export MRL_API_TOKEN=mrlp_...       # from the lab's API tokens page (/settings/tokens/)
#     python examples/notebook.py --url http://127.0.0.1:8000 [--metric val/reward@1/carry]
#
# `--saved SLUG` draws a saved comparison instead, with the very numbers its page draws.
# matplotlib is optional: without it the script prints the table it would have drawn.

# %%
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from mutual_rl_lab_client import Lab, LabError

parser = argparse.ArgumentParser(description="The demo's regime comparison, via the API.")
parser.add_argument("--url", default=os.environ.get("MRL_URL", "http://127.0.0.1:8000"))
parser.add_argument("--token", default=None, help="default: $MRL_API_TOKEN")
parser.add_argument("--metric", default="val/reward@1")
parser.add_argument("--x", default="tokens", choices=("step", "rollouts", "tokens"))
parser.add_argument("--experiment-prefix", default="demo-", help="the demo's experiments")
parser.add_argument("--saved", default=None, help="a saved comparison's slug, id or URL")
parser.add_argument("--out", type=Path, default=Path("regime_comparison.png"))
args, _ = parser.parse_known_args()  # known only: a notebook kernel passes its own

lab = Lab(args.url, token=args.token)

# %% The runs: one row a run, its config flattened into columns.
try:
    runs = lab.runs(metrics=[args.metric])
except LabError as error:
    sys.exit(f"could not read the lab's runs: {error}")
runs = runs[runs["experiment"].str.startswith(args.experiment_prefix)]
if runs.empty:
    sys.exit(f"no runs of experiments named {args.experiment_prefix}*: run `make demo` first")
best = [column for column in runs.columns if column.startswith("best/")]
print(runs[["id", "name", "regime", "seed", "state", *best]].to_string(index=False))

# %% The curves: a long table, one row a point (run, policy, key, step, x, value).
if args.saved:
    curves = lab.comparison(args.saved)  # mean and band per group, as its page draws them
    curves = curves[curves["metric"] == args.metric].rename(columns={"group": "regime"})
    x_label = curves.attrs.get("x_label", "x")
else:
    points = lab.history(runs, [args.metric], x=args.x)
    points = points.merge(runs[["id", "regime"]], left_on="run", right_on="id")
    points = points[points["policy"] != "_pool"]
    # per regime: the mean over its runs at each step, and their spread
    curves = (
        points.groupby(["policy", "regime", "step"])
        .agg(x=("x", "mean"), mean=("value", "mean"), std=("value", "std"), n=("value", "size"))
        .reset_index()
    )
    curves["lower"] = curves["mean"] - curves["std"].fillna(0.0)
    curves["upper"] = curves["mean"] + curves["std"].fillna(0.0)
    x_label = {"step": "step", "rollouts": "rollouts", "tokens": "response tokens"}[args.x]

# %% The figure (matplotlib is optional).
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    plt = None

if plt is None:
    print("matplotlib is not installed (pip install matplotlib): the curves, as a table:")
    print(curves.to_string(index=False))
else:
    policies = sorted(curves["policy"].unique())
    figure, axes = plt.subplots(
        1, len(policies), figsize=(4 * len(policies), 3.2), squeeze=False, sharey=True
    )
    for axis, policy in zip(axes[0], policies, strict=True):
        for regime, line in curves[curves["policy"] == policy].groupby("regime"):
            line = line.sort_values("x")
            drawn: Any = axis.plot(line["x"], line["mean"], label=str(regime))
            axis.fill_between(
                line["x"], line["lower"], line["upper"], alpha=0.2, color=drawn[0].get_color()
            )
        axis.set_title(policy)
        axis.set_xlabel(x_label)
    axes[0][0].set_ylabel(args.metric)
    axes[0][-1].legend(title="regime")
    figure.tight_layout()
    figure.savefig(args.out, dpi=150)
    print(f"wrote {args.out}")
