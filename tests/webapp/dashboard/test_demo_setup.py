"""`manage.py demo_setup`: the embedded demo's user, registry and sweep, idempotently."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from trainer.config import RunConfig
from trainer.zoo import SMOLLM2_IDS
from webapp.registry.models import ModelEntry
from webapp.runs.models import Experiment, Run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def tiny_zoo_only(settings: Any, built_zoo: Path, tmp_path: Path) -> Path:
    """The test zoo without the converted SmolLM2, which the demo registers too once it is
    built (issue 33, tests/webapp/registry/test_smollm2_source.py): these counts are the
    tiny zoo's, whatever else was built into the test zoo."""
    root = tmp_path / "zoo"
    root.mkdir()
    for child in built_zoo.iterdir():
        if child.is_dir() and not child.name.startswith(".") and child.name not in SMOLLM2_IDS:
            (root / child.name).symlink_to(child)
    settings.ZOO_DIR = str(root)
    return root


def test_it_creates_the_user_registry_and_sweep_once(
    django_capture_on_commit_callbacks: object,
) -> None:
    out = io.StringIO()
    with django_capture_on_commit_callbacks() as callbacks:  # type: ignore[operator]
        call_command("demo_setup", "--sweep", stdout=out)
    assert len(callbacks) == 2  # one run_submit per run, sent once the launch commits
    entries = ModelEntry.objects.order_by("source").values_list("source", "family")
    assert list(entries) == [
        ("zoo:tiny-gpt2-unigram", "gpt2"),
        ("zoo:tiny-gpt2-unigram-nohundreds", "gpt2"),
        ("zoo:tiny-llama-char", "llama"),
        ("zoo:tiny-llama-char-sum", "llama"),
        ("zoo:tiny-qwen-bpe", "qwen2"),
        ("zoo:tiny-qwen-bpe-nocarry", "qwen2"),
    ]
    experiments = Experiment.objects.order_by("name")
    assert [(e.name, e.regime, e.owner.username) for e in experiments] == [
        ("demo-sgt", "sgt", "demo"),
        ("demo-standalone", "standalone", "demo"),
    ]
    for experiment in experiments:  # the gap pool, as examples/gap.json runs it
        config = RunConfig.from_dict(experiment.config)
        assert [policy.model for policy in config.pool] == [
            "zoo:tiny-llama-char-sum",
            "zoo:tiny-qwen-bpe-nocarry",
            "zoo:tiny-gpt2-unigram-nohundreds",
        ]
        assert config.task.kind == "addition_slices" and config.steps == 60
        example = RunConfig.from_dict(json.loads(Path("examples/gap.json").read_text()))
        assert config.pool == example.pool
        # Each keeps its own regime's section only: the SGT one, SGT's as the example's.
        own = example.sections if config.regime == example.regime else {}
        assert config.sections == own
    runs = Run.objects.all()
    assert sorted((r.regime, r.state, r.backend) for r in runs) == [
        ("sgt", "queued", "local"),
        ("standalone", "queued", "local"),
    ]
    for run in runs:
        assert f"/runs/{run.pk}/" in out.getvalue()

    call_command("demo_setup", "--sweep", stdout=io.StringIO())
    assert Experiment.objects.count() == 2 and Run.objects.count() == 2
    assert ModelEntry.objects.count() == 6
