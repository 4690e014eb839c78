"""Prepare the embedded demo: a demo user in the lab, the tiny zoo in the registry, the
trainer's synthetic evaluation suite (written to ``<var>/suites/synthetic``) in the suite
registry and, with ``--sweep``, a demo sweep: one 3-policy pool trained under
``standalone`` and under ``sgt`` on the local backend (CPU, a few minutes), launched at
once; each run is evaluated on the synthetic suite when it completes.

Idempotent: running it again changes nothing (the sweep is launched only once).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser

from scheduler.launch import experiment_launch
from trainer.evals.suite import SuiteConfig
from trainer.evals.synthetic import write_synthetic_suite
from trainer.zoo import ZOO_IDS
from webapp.experiments.models import EvalSuite, Experiment, Lab, ModelEntry, Run
from webapp.experiments.services import experiment_create, lab_join

ZOO_FAMILIES = {"tiny-llama-char": "llama", "tiny-qwen-bpe": "qwen2", "tiny-gpt2-unigram": "gpt2"}


DEMO_POOL = [
    {"name": "llama-char", "model": "zoo:tiny-llama-char", "lr": 3e-4},
    {"name": "qwen-bpe", "model": "zoo:tiny-qwen-bpe", "lr": 3e-4},
    {"name": "gpt2-unigram", "model": "zoo:tiny-gpt2-unigram", "lr": 3e-4},
]
DEMO_REGIMES = ("standalone", "sgt")


def demo_config(regime: str) -> dict[str, Any]:
    """A pool that learns visibly within a few minutes on two CPU cores."""
    return {
        "name": f"demo-{regime}",
        "regime": regime,
        "pool": DEMO_POOL,
        "task": {"levels": [1, 2, 3], "val_size": 32},
        "steps": 100,
        "prompts_per_step": 16,
        "val_every": 10,
        "checkpoint_every": 20,
    }


class Command(BaseCommand):
    help = "Create the demo user and lab, register the tiny zoo, print how to log in."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="demo")
        parser.add_argument("--password", default="demo-password")
        parser.add_argument(
            "--sweep", action="store_true", help="create and launch the demo sweep (once)"
        )

    def handle(self, *args: Any, username: str, password: str, sweep: bool, **options: Any) -> None:
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(username=username)
        if created:
            user.set_password(password)
            user.save(update_fields=["password"])
        lab = lab_join(user)
        for zoo_id in ZOO_IDS:
            ModelEntry.objects.get_or_create(
                lab=lab,
                name=zoo_id,
                defaults={
                    "owner": user,
                    "source": f"zoo:{zoo_id}",
                    "family": ZOO_FAMILIES.get(zoo_id, ""),
                    "notes": "Tiny zoo model built by `python -m trainer zoo build`.",
                },
            )
        suite = self._demo_suite(user, lab)
        state = "created" if created else "exists"
        self.stdout.write(f"demo user {username!r} {state}; log in with password {password!r}")
        if sweep:
            for run in self._demo_sweep(user, suite):
                self.stdout.write(f"  {run.regime:<10} run {run.pk}: {run.get_absolute_url()}")

    def _demo_suite(self, user: Any, lab: Lab) -> EvalSuite:
        """The synthetic suite (seed 0, 32 items a task) in the lab's suite registry."""
        path = write_synthetic_suite(settings.VAR_DIR / "suites" / "synthetic", seed=0, size=32)
        config = SuiteConfig.from_file(path)
        suite, _ = EvalSuite.objects.get_or_create(
            lab=lab,
            name=config.name,
            defaults={
                "owner": user,
                "tasks": config.to_dict()["tasks"],
                "description": "Built by `python -m trainer eval-suite synthetic`: the four "
                "arithmetic skills, a multiple-choice task and templated word problems.",
            },
        )
        return suite

    def _demo_sweep(self, user: Any, suite: EvalSuite) -> list[Run]:
        """The demo's runs, launched on first use (one experiment per regime, seed 0)."""
        runs = []
        for regime in DEMO_REGIMES:
            experiment = Experiment.objects.filter(owner=user, name=f"demo-{regime}").first()
            if experiment is None:
                experiment = experiment_create(
                    owner=user,
                    config=demo_config(regime),
                    seeds=[0],
                    resources={"backend": "local", "partition": "local"},
                    description="The embedded demo: standalone GRPO vs success-gated transfer.",
                    tags=["demo"],
                    auto_eval_suite=suite,
                )
                runs += experiment_launch(experiment)
            else:
                runs += list(experiment.runs.order_by("id")[:1])
        return runs
