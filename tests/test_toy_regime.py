"""A regime is one declaration: a toy regime registered here, in this module only, shows
up in config validation, the trainer's regime factory, the compose form, the run page's
chart groups and transfer filter, the ingestion API and the comparison's order and
colours, with no other file changed (issue 19). And a regime of another package, with a
name of 30 characters, installed as a plug-in through the entry-point group, leaves
every other regime's configs as they were and saves its own runs (issue 32)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from trainer.batch import LearnerBatch
from trainer.config import ConfigError, RunConfig
from trainer.exchange import StepRecord
from trainer.metrics import SHARING, MetricInfo
from trainer.policy import Policy, Rollouts
from trainer.regimes import EventKind, RegimeSpec, make_regime, regime_names, registered
from trainer.regimes.base import Regime, RegimeStep
from webapp.compare.grouping import ordered
from webapp.compare.palette import styles_for
from webapp.metrics.catalogue import groups_as_json, metrics_as_json

TOY_BOOST = "toy/boost"
TOY_HINT = "toy_hint"


@dataclass
class ToyConfig:
    """Toy sharing: peers whisper hints."""

    strength: float = field(
        default=0.5, metadata={"help": "How loud the hints are (> 0)", "label": "Hint strength"}
    )
    hints: int = field(default=2, metadata={"help": "Hints per prompt (>= 1)"})

    def problems(self, run: RunConfig) -> dict[str, str]:
        problems: dict[str, str] = {}
        if not self.strength > 0:
            problems["strength"] = f"strength must be > 0; got {self.strength}"
        if self.hints < 1:
            problems["hints"] = f"hints must be >= 1; got {self.hints}"
        return problems


class ToyRegime(Regime):
    """Trains like standalone GRPO (the point is the declaration, not the algorithm)."""

    name = "toy"
    settings: ToyConfig

    def learn(
        self, policy: Policy, rollouts: Rollouts, peers: list[StepRecord], step: int
    ) -> RegimeStep:
        batch = LearnerBatch.on_policy(rollouts, policy.advantages(rollouts))
        return RegimeStep(batch, metrics={TOY_BOOST: self.settings.strength})


TOY = RegimeSpec(
    name="toy",
    label="Toy Whispering",
    summary="Peers whisper hints to each other.",
    implementation=f"{__name__}:ToyRegime",
    order=10,
    colour="#CC79A7",
    config=ToyConfig,
    metrics=(MetricInfo(TOY_BOOST, "Toy boost", "", SHARING),),
    event_kinds=(EventKind(TOY_HINT, "whispered hint (toy)"),),
)


@pytest.fixture
def toy() -> Iterator[RegimeSpec]:
    with registered(TOY) as spec:
        yield spec


def toy_config(**overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "name": "toy-run",
        "regime": "toy",
        "pool": [
            {"name": "llama", "model": "zoo:tiny-llama-char"},
            {"name": "qwen", "model": "zoo:tiny-qwen-bpe"},
        ],
        "steps": 4,
        "prompts_per_step": 4,
    }
    config.update(overrides)
    return config


def test_unregistered_the_toy_regime_is_refused_by_name() -> None:
    with pytest.raises(ConfigError) as caught:
        RunConfig.from_dict(toy_config())
    assert caught.value.errors["regime"] == (
        "unknown regime 'toy'; use one of standalone, prp, xgrpo, sgt, sequential_sft"
    )
    assert "toy" not in regime_names()


def test_the_run_config_parses_validates_and_writes_the_toy_section(toy: RegimeSpec) -> None:
    config = RunConfig.from_dict(toy_config(toy={"strength": 2.0}))
    assert config.section("toy") == ToyConfig(strength=2.0, hints=2)
    assert config.to_dict()["toy"] == {"strength": 2.0, "hints": 2}
    assert RunConfig.from_json(config.to_json()) == config

    with pytest.raises(ConfigError) as caught:
        RunConfig.from_dict(toy_config(toy={"strength": -1.0, "hints": 0}))
    assert caught.value.errors["toy.strength"] == "strength must be > 0; got -1.0"
    assert caught.value.errors["toy.hints"] == "hints must be >= 1; got 0"

    with pytest.raises(ConfigError) as caught:
        RunConfig.from_dict(toy_config(toy={"loudness": 1}))
    assert caught.value.errors["toy.loudness"].startswith("unknown field 'loudness' in toy")

    with pytest.raises(ConfigError) as caught:  # it shares, so it needs two policies
        RunConfig.from_dict(toy_config(pool=[{"name": "llama", "model": "zoo:tiny-llama-char"}]))
    assert "regime 'toy' shares experience between policies" in caught.value.errors["pool"]


def test_the_trainer_builds_the_toy_implementation(toy: RegimeSpec) -> None:
    config = RunConfig.from_dict(toy_config(toy={"strength": 3.0}))
    regime = make_regime(config, "llama", {})
    assert isinstance(regime, ToyRegime)
    assert regime.settings.strength == 3.0


def test_the_run_page_groups_name_the_toy_metric(toy: RegimeSpec) -> None:
    sharing = next(group for group in groups_as_json() if group["slug"] == "sharing")
    assert TOY_BOOST in sharing["keys"]  # type: ignore[operator]
    assert metrics_as_json()[TOY_BOOST] == {"label": "Toy boost", "unit": "", "group": "sharing"}


def test_comparisons_order_and_colour_the_toy_regime_as_a_regime(toy: RegimeSpec) -> None:
    labels = ordered(["zeta", "toy", "0.5", "sgt", "standalone"])
    assert labels == ["standalone", "sgt", "toy", "0.5", "zeta"]
    styles = styles_for(labels)
    assert styles["toy"].colour == "#CC79A7"
    assert len({style.colour for style in styles.values()}) == len(labels)


@pytest.mark.django_db
def test_the_compose_form_offers_the_toy_regime_and_its_settings(
    toy: RegimeSpec, client: Client, alice: User
) -> None:
    client.force_login(alice)
    page = client.get("/experiments/new/").content.decode()
    assert '<option value="toy">Toy Whispering</option>' in page
    assert "Hint strength" in page and "How loud the hints are" in page


@pytest.mark.django_db
def test_the_run_page_charts_and_filters_the_toy_regime(toy: RegimeSpec, alice: User) -> None:
    from webapp.runs import services

    experiment = services.experiment_create(owner=alice, config=toy_config(), seeds=[0])
    run = services.runs_create(experiment)[0]
    client = Client()
    client.force_login(alice)
    page = client.get(run.get_absolute_url()).content.decode()
    assert '<option value="toy_hint">whispered hint (toy)</option>' in page
    config_json = page[page.index('id="run-page-config"') :]
    config_json = config_json[config_json.index(">") + 1 : config_json.index("</script>")]
    page_config = json.loads(config_json)
    assert page_config["metrics"][TOY_BOOST]["label"] == "Toy boost"


# --- a plug-in: another package, installed, found through its entry point ------------------
PLUGIN_NAME = "whispering_peers_long_name_xyz"
PLUGIN_SOURCE = f"""
from dataclasses import dataclass, field

from trainer.declarations import EventKind, RegimeSpec, register_regime


@dataclass
class WhisperConfig:
    volume: float = field(default=0.25, metadata={{"help": "How loud (>= 0)", "min": 0}})


SPEC = register_regime(
    RegimeSpec(
        name="{PLUGIN_NAME}",
        label="Long-named whispering",
        summary="Peers whisper, under a long name.",
        implementation="tests.test_toy_regime:ToyRegime",
        order=20,
        colour="#117733",
        config=WhisperConfig,
        event_kinds=(EventKind("long_whisper", "long whisper (plug-in)"),),
    )
)
"""


@pytest.fixture
def installed_plugin(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package on sys.path with a distribution's metadata naming it in the entry-point
    group, as ``pip install`` of a plug-in leaves it; gone after the test."""
    import sys

    from trainer import declarations

    (tmp_path / "mrl_whisper_plugin").mkdir()
    (tmp_path / "mrl_whisper_plugin" / "__init__.py").write_text(PLUGIN_SOURCE)
    dist = tmp_path / "mrl_whisper_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: mrl-whisper-plugin\nVersion: 0.1\n"
    )
    (dist / "entry_points.txt").write_text(
        f"[{declarations.ENTRY_POINT_GROUP}]\nwhisper = mrl_whisper_plugin\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        yield PLUGIN_NAME
    finally:
        if PLUGIN_NAME in declarations.REGIMES.names():
            declarations.REGIMES.unregister(PLUGIN_NAME)
        sys.modules.pop("mrl_whisper_plugin", None)


@pytest.mark.django_db
def test_a_plugin_with_a_30_character_name_is_found_and_changes_no_other_config(
    installed_plugin: str, alice: User
) -> None:
    from webapp.runs import services
    from webapp.runs.models import Run

    assert len(installed_plugin) == 30 and installed_plugin not in regime_names()
    standalone = {"name": "plain", "pool": toy_config()["pool"], "steps": 4}
    before = RunConfig.from_dict(standalone).to_dict()

    from trainer.declarations import load_regimes

    load_regimes(rescan=True)  # as the entry points do at start-up
    assert installed_plugin in regime_names()
    # Every other regime's config is as it was: no section of the plug-in in it, so a
    # trainer without the plug-in reads it.
    assert RunConfig.from_dict(standalone).to_dict() == before
    assert installed_plugin not in before
    # The plug-in's own config carries its section, and its runs save (the regime
    # columns hold the registry's longest name).
    own = toy_config(regime=installed_plugin, **{installed_plugin: {"volume": 0.5}})
    assert RunConfig.from_dict(own).to_dict()[installed_plugin] == {"volume": 0.5}
    experiment = services.experiment_create(owner=alice, config=own, seeds=[0])
    [run] = services.runs_create(experiment)
    run.refresh_from_db()
    assert Run.objects.get(pk=run.pk).regime == installed_plugin
