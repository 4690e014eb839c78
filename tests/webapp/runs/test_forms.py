"""The experiment form: generic config sections, the pool formset, every validation message.

Forms are driven like a browser drives them: :func:`browser_data` reads what the page
would submit (every field's rendered value), a test changes a few fields, and the bound
:class:`ExperimentComposer` validates it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.http import QueryDict
from django.test import override_settings

from scheduler.jobs import sbatch_args
from trainer.config import PolicyConfig, RunConfig
from trainer.regimes import RegimeSpec, registered
from trainer.regimes import section_names as regime_section_names
from webapp.core.configform import section_names
from webapp.core.models import Lab
from webapp.registry.models import ModelEntry
from webapp.runs import services
from webapp.runs.compose import ExperimentComposer
from webapp.runs.filters import experiment_filter_form
from webapp.runs.forms import ResourcesForm, parse_seeds, parse_tags
from webapp.runs.sweep_forms import SweepForm

pytestmark = pytest.mark.django_db

GPU_PARTITIONS = {
    "local": {"nodes": 1, "gpus_per_node": 0, "cpus_per_node": 4, "mem_gb_per_node": 16},
    "gpu": {"nodes": 2, "gpus_per_node": 4, "cpus_per_node": 32, "mem_gb_per_node": 256},
}
LLAMA_CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "intermediate_size": 256,
    "vocab_size": 163,
    "tie_word_embeddings": True,
}


# --- helpers shared with the view and registry tests -----------------------------------------
def browser_data(composer: ExperimentComposer) -> dict[str, str]:
    """What the browser submits for ``composer``'s page as rendered (unchanged)."""
    return composer.as_data().dict()


def add_policy(data: dict[str, str], composer: ExperimentComposer, **values: Any) -> int:
    """Append a policy like the page's "Add policy" does; return its index."""
    index = int(data["pool-TOTAL_FORMS"])
    for field in composer.pool.empty_form:
        name = field.html_name.replace("__prefix__", str(index))
        value = field.value()
        if field.widget_type == "checkbox":
            if value:  # a box checked by default is sent as "on", as the browser does
                data[name] = "on"
            continue
        data[name] = "" if value is None else str(value)
    data["pool-TOTAL_FORMS"] = str(index + 1)
    data[f"pool-{index}-ORDER"] = str(index + 1)
    for name, value in values.items():
        data[f"pool-{index}-{name}"] = str(value)
    return index


def query(data: dict[str, str]) -> QueryDict:
    result = QueryDict(mutable=True)
    for key, value in data.items():
        result[key] = value
    return result


def sgt_data(composer: ExperimentComposer) -> dict[str, str]:
    """A valid 3-policy SGT experiment, composed on a fresh page."""
    data = browser_data(composer)
    data.update(
        {
            "name": "sgt-three",
            "description": "SGT on three tokenizers",
            "tags": "sgt, pilot",
            "regime": "sgt",
            "seeds": "0, 1, 2",
            "steps": "40",
            "prompts_per_step": "16",
            "sgt-lambda_sgt": "0.2",
            "sgt-k_sgt": "2",
            "pool-0-name": "llama",
            "pool-0-model": "zoo:tiny-llama-char",
            "pool-1-name": "qwen",
            "pool-1-model": "zoo:tiny-qwen-bpe",
            "pool-1-lr": "0.0002",
            "pool-1-group_size": "4",
        }
    )
    add_policy(data, composer, name="gpt2", model="zoo:tiny-gpt2-unigram", temperature="0.7")
    return data


@pytest.fixture(autouse=True)
def _empty_zoo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No built zoo: every zoo policy weighs the same (1) for MWRA."""
    monkeypatch.setenv("MRL_ZOO_DIR", str(tmp_path / "zoo"))


def compose(
    lab: Lab, data: dict[str, str] | None = None, **kwargs: Any
) -> tuple[ExperimentComposer, bool]:
    composer = ExperimentComposer(None if data is None else query(data), lab=lab, **kwargs)
    return composer, composer.is_valid()


def bound(lab: Lab, changes: dict[str, str]) -> ExperimentComposer:
    data = sgt_data(ExperimentComposer(lab=lab))
    data.update(changes)
    composer, _ = compose(lab, data)
    return composer


def pool_form(composer: ExperimentComposer, index: int) -> Any:
    return composer.pool.forms[index]


def section_form(composer: ExperimentComposer, name: str) -> Any:
    return next(section.form for section in composer.sections if section.name == name)


# --- the generic sections --------------------------------------------------------------------
def test_every_config_section_and_field_is_on_the_page(lab: Lab) -> None:
    composer = ExperimentComposer(lab=lab)
    hints = {f.name for f in fields(RunConfig)} | set(regime_section_names())
    assert {section.name for section in composer.sections} == set(section_names())
    assert {"grpo", "task", "prp", "xgrpo", "sgt"} <= set(section_names()) <= hints
    sgt = section_form(composer, "sgt")
    assert sgt["lambda_sgt"].initial == 0.1
    assert sgt.fields["lambda_sgt"].help_text == "Weight of the auxiliary NLL (>= 0)"
    assert sgt.fields["lambda_sgt"].label == "NLL weight (lambda)"  # its metadata["label"]
    assert section_form(composer, "grpo").fields["loss_agg"].choices == [
        ("token-mean", "token-mean"),
        ("seq-mean-token-mean", "seq-mean-token-mean"),
    ]
    policy = PolicyConfig.__dataclass_fields__
    assert set(pool_form(composer, 0).fields) == set(policy) | {"ORDER", "DELETE"}
    assert [s.name for s in composer.sections if s.switch == "regime"] == [
        name for name in section_names() if name in ("prp", "xgrpo", "sgt", "sequential_sft")
    ]


def test_only_the_chosen_regimes_section_is_relevant(lab: Lab) -> None:
    composer = bound(lab, {"regime": "prp"})
    relevance = {section.name: section.relevant for section in composer.sections}
    assert relevance["prp"] and not relevance["sgt"] and not relevance["xgrpo"]
    assert relevance["grpo"] and relevance["task"]
    if "remix" in relevance:
        assert not relevance["remix"]


@dataclass
class EchoConfig:
    """Echo sharing: peers repeat each other."""

    loudness: float = dataclasses.field(
        default=0.5,
        metadata={"help": "How loud", "label": "Echo loudness", "min": 0, "max": 2},
    )
    echoes: int = dataclasses.field(default=1, metadata={"help": "Echoes per prompt", "min": 1})

    def problems(self, run: RunConfig) -> dict[str, str]:
        return {}


ECHO = RegimeSpec(
    name="echo",
    label="Echo Chamber",
    summary="Peers repeat each other.",
    implementation="tests.webapp.runs.test_forms:NoSuchRegime",  # never loaded by the forms
    order=20,
    colour="#777777",
    config=EchoConfig,
)


def test_a_regime_registered_at_run_time_is_on_every_form_with_its_settings(lab: Lab) -> None:
    with registered(ECHO):
        composer = ExperimentComposer(lab=lab)
        assert ("echo", "Echo Chamber") in composer.form.fields["regime"].choices
        echo = next(section for section in composer.sections if section.name == "echo")
        assert (echo.title, echo.description, echo.switch) == (
            "Echo Chamber",
            "Echo sharing: peers repeat each other.",
            "regime",
        )
        loudness = echo.form.fields["loudness"]
        assert (loudness.label, loudness.help_text) == ("Echo loudness", "How loud")
        assert (loudness.widget.attrs["min"], loudness.widget.attrs["max"]) == (0, 2)

        data = sgt_data(composer)
        data.update({"regime": "echo", "echo-loudness": "3", "echo-echoes": "2"})
        loud, valid = compose(lab, data)
        assert not valid
        assert section_form(loud, "echo").errors["loudness"] == [
            "loudness must be in [0, 2]; got 3.0"
        ]
        data["echo-loudness"] = "1.5"
        quiet, valid = compose(lab, data)
        assert valid and quiet.config is not None
        assert (quiet.config["regime"], quiet.config["echo"]) == (
            "echo",
            {"loudness": 1.5, "echoes": 2},
        )

        sweep = SweepForm()
        assert ("echo", "Echo Chamber") in sweep.fields["regimes"].choices  # type: ignore[attr-defined]
        assert "echo.loudness" in sweep.paths and "sgt.lambda_sgt" in sweep.paths
        filters = experiment_filter_form(None)
        assert ("echo", "Echo Chamber") in filters.fields["regime"].choices  # type: ignore[attr-defined]
    assert "echo" not in {section.name for section in ExperimentComposer(lab=lab).sections}
    assert "echo" not in dict(SweepForm().fields["regimes"].choices)  # type: ignore[attr-defined]


# --- a valid experiment ----------------------------------------------------------------------
def test_a_valid_three_policy_sgt_form_gives_the_trainer_json(lab: Lab) -> None:
    composer, valid = compose(lab, sgt_data(ExperimentComposer(lab=lab)))

    assert valid, composer.has_errors()
    expected = RunConfig.from_dict(
        {
            "name": "sgt-three",
            "regime": "sgt",
            "off_policy": "none",
            "steps": 40,
            "prompts_per_step": 16,
            "sgt": {"lambda_sgt": 0.2, "k_sgt": 2},
            "pool": [
                {"name": "llama", "model": "zoo:tiny-llama-char"},
                {"name": "qwen", "model": "zoo:tiny-qwen-bpe", "lr": 0.0002, "group_size": 4},
                {"name": "gpt2", "model": "zoo:tiny-gpt2-unigram", "temperature": 0.7},
            ],
        }
    ).to_dict()
    assert composer.config == expected
    assert composer.config["pool"][1] == {
        "name": "qwen",
        "model": "zoo:tiny-qwen-bpe",
        "tokenizer": None,
        "chat_template": None,
        "lr": 0.0002,
        "group_size": 4,
        "max_new_tokens": 16,
        "temperature": 1.0,
        "dtype": "float32",
        "micro_batch_size": 64,
        "micro_batch_tokens": None,
        "gradient_checkpointing": False,
        "reference_on_cpu": False,
        "rollout_cache": "dynamic",
        "rollout_compile": False,
        "rollout_prefix_reuse": False,
        "update_prefix_reuse": True,
        "device_share": None,
    }
    saved = composer.save_kwargs()
    assert saved["seeds"] == [0, 1, 2]
    assert saved["tags"] == ["sgt", "pilot"]
    assert saved["resources"]["placement"]["device"] == "cpu"
    assert [p["name"] for p in saved["resources"]["placement"]["policies"]] == [
        "llama",
        "qwen",
        "gpt2",
    ]


def test_hidden_sections_keep_their_defaults_and_are_not_validated(lab: Lab) -> None:
    composer = bound(lab, {"regime": "prp", "sgt-lambda_sgt": "7", "sgt-k_sgt": "oops"})

    assert composer.is_valid()
    assert composer.config is not None
    assert "sgt" not in composer.config  # a regime owns its section: PRP's config has none
    assert composer.config["prp"] == RunConfig.from_dict(composer.config).to_dict()["prp"]
    # What was typed stays on screen in case the researcher switches back.
    assert section_form(composer, "sgt")["k_sgt"].value() == "oops"


def test_registry_names_supply_source_tokenizer_template_and_size(
    lab: Lab, alice: User, tmp_path: Path
) -> None:
    model_dir = tmp_path / "big"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    (model_dir / "tokenizer.json").write_text("{}")
    ModelEntry.objects.create(
        lab=lab,
        owner=alice,
        name="big-model",
        source=str(model_dir),
        tokenizer=str(model_dir),
        chat_template="{{ messages }}",
        parameter_count=7_000_000_000,
    )
    with override_settings(PARTITIONS=GPU_PARTITIONS):
        composer = bound(
            lab,
            {
                "pool-0-model": "big-model",
                "resources-backend": "slurm",
                "resources-partition": "gpu",
                "resources-gpus": "4",
            },
        )
        assert composer.is_valid()
    assert composer.config is not None and composer.plan is not None
    assert composer.config["pool"][0]["model"] == str(model_dir)
    assert composer.config["pool"][0]["tokenizer"] == str(model_dir)
    assert composer.config["pool"][0]["chat_template"] == "{{ messages }}"
    # 7B vs two tiny zoo models (~0.15 M each): 2 GPUs for the big one, one each for the rest.
    assert composer.plan.policy("llama").cuda_visible_devices == "0,1"
    assert composer.plan.policy("qwen").cuda_visible_devices == "2"
    assert sbatch_args(composer.plan.slurm)[:3] == ["--nodes=1", "--ntasks=3", "--gres=gpu:4"]
    rows = composer.plan_rows()
    assert (rows[0].parameters.value, rows[0].parameters.origin) == (7_000_000_000, "declared")
    assert (rows[1].parameters.value, rows[1].parameters.origin) == (149_184, "zoo")


def test_a_local_model_directory_is_accepted_and_sized_from_its_config(
    lab: Lab, tmp_path: Path
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    composer = bound(lab, {"pool-2-model": str(tmp_path)})

    assert composer.is_valid()
    assert composer.config is not None
    assert composer.config["pool"][2]["model"] == str(tmp_path)
    assert composer.plan_rows()[2].parameters.value == 141824


# --- the pool formset ------------------------------------------------------------------------
def test_deleted_and_reordered_policies_follow_the_screen(lab: Lab) -> None:
    composer = ExperimentComposer(lab=lab)
    data = sgt_data(composer)
    add_policy(data, composer, name="extra", model="zoo:tiny-qwen-bpe")
    # Screen order: gpt2, extra, qwen; llama removed.
    data.update(
        {
            "pool-0-DELETE": "on",
            "pool-0-group_size": "1",  # a removed policy is not validated
            "pool-2-ORDER": "1",
            "pool-3-ORDER": "2",
            "pool-1-ORDER": "3",
        }
    )
    composer, valid = compose(lab, data)

    assert valid
    assert composer.config is not None
    assert [p["name"] for p in composer.config["pool"]] == ["gpt2", "extra", "qwen"]


def test_config_errors_land_on_the_visible_policy_they_name(lab: Lab) -> None:
    composer = ExperimentComposer(lab=lab)
    data = sgt_data(composer)
    # Screen order: gpt2 (index 2) first, then qwen; llama removed. gpt2 has G = 1.
    data.update(
        {
            "pool-0-DELETE": "on",
            "pool-2-ORDER": "1",
            "pool-1-ORDER": "2",
            "pool-2-group_size": "1",
        }
    )
    composer, valid = compose(lab, data)

    assert not valid
    assert pool_form(composer, 2).errors["group_size"] == [
        "G must be at least 2 for a group baseline; got 1"
    ]
    assert not pool_form(composer, 1).errors


def test_a_pool_needs_one_to_eight_policies(lab: Lab) -> None:
    composer = ExperimentComposer(lab=lab)
    data = sgt_data(composer)
    data.update({"pool-0-DELETE": "on", "pool-1-DELETE": "on", "pool-2-DELETE": "on"})
    composer_empty, valid = compose(lab, data)
    assert not valid
    assert composer_empty.pool.non_form_errors() == ["add at least 1 policy to the pool"]

    data = sgt_data(composer)
    for index in range(6):
        add_policy(data, composer, name=f"extra{index}", model="zoo:tiny-qwen-bpe")
    composer_full, valid = compose(lab, data)
    assert not valid
    assert composer_full.pool.non_form_errors() == ["a pool has at most 8 policies; remove one"]


def test_sharing_regimes_need_two_policies(lab: Lab) -> None:
    composer = ExperimentComposer(lab=lab)
    data = sgt_data(composer)
    data.update({"pool-1-DELETE": "on", "pool-2-DELETE": "on"})
    composer, valid = compose(lab, data)

    assert not valid
    assert "add a second policy" in composer.pool.non_form_errors()[0]


# --- every validation message next to its field ----------------------------------------------
def test_an_unknown_model_says_what_is_accepted(lab: Lab) -> None:
    composer = bound(lab, {"pool-1-model": "llama-70b"})

    assert not composer.is_valid()
    (message,) = pool_form(composer, 1).errors["model"]
    assert message.startswith("unknown model 'llama-70b'")
    assert "registry" in message and "zoo:<id>" in message and "absolute path" in message


@pytest.mark.parametrize(
    ("model", "fragment"),
    [
        ("/no/such/model/dir", "no such directory"),
        ("zoo:tiny-mystery", "unknown zoo model 'tiny-mystery'"),
    ],
)
def test_an_unknown_model_path_or_zoo_id_is_refused(lab: Lab, model: str, fragment: str) -> None:
    composer = bound(lab, {"pool-0-model": model})

    assert not composer.is_valid()
    (message,) = pool_form(composer, 0).errors["model"]
    assert message.startswith(f"unknown model {model!r}") and fragment in message


def test_a_directory_without_config_json_is_refused(lab: Lab, tmp_path: Path) -> None:
    composer = bound(lab, {"pool-0-model": str(tmp_path)})

    assert not composer.is_valid()
    assert "has no config.json" in pool_form(composer, 0).errors["model"][0]


def test_group_size_below_two_is_refused(lab: Lab) -> None:
    composer = bound(lab, {"pool-1-group_size": "1"})

    assert not composer.is_valid()
    assert pool_form(composer, 1).errors["group_size"] == [
        "G must be at least 2 for a group baseline; got 1"
    ]


def test_a_batch_not_divisible_by_mini_batches_is_refused(lab: Lab) -> None:
    composer = bound(lab, {"grpo-mini_batches": "3"})

    assert not composer.is_valid()
    (message,) = section_form(composer, "grpo").errors["mini_batches"]
    assert "must be divisible by mini_batches (3)" in message


def test_a_mini_batch_not_divisible_by_micro_batch_size_is_refused(lab: Lab) -> None:
    composer = bound(lab, {"pool-0-micro_batch_size": "48"})

    assert not composer.is_valid()
    (message,) = pool_form(composer, 0).errors["micro_batch_size"]
    assert "must be divisible by micro_batch_size (48)" in message


def test_the_rollout_cache_is_a_select_and_compile_a_checkbox(lab: Lab) -> None:
    form = pool_form(ExperimentComposer(lab=lab), 0)
    assert form.fields["rollout_cache"].choices == [("dynamic", "dynamic"), ("static", "static")]
    assert form["rollout_cache"].initial == "dynamic"
    assert form.fields["rollout_cache"].label == "Rollout KV cache"
    assert form.fields["rollout_compile"].widget.input_type == "checkbox"
    assert form.fields["rollout_compile"].label == "Compile rollouts"
    assert "needs the static rollout cache" in form.fields["rollout_compile"].help_text


def test_a_static_rollout_cache_reaches_the_trainer_json(lab: Lab) -> None:
    composer = bound(lab, {"pool-1-rollout_cache": "static"})

    assert composer.is_valid(), composer.has_errors()
    assert composer.config is not None
    assert [p["rollout_cache"] for p in composer.config["pool"]] == ["dynamic", "static", "dynamic"]
    assert [p["rollout_compile"] for p in composer.config["pool"]] == [False, False, False]


def test_rollout_compile_without_the_static_cache_is_refused_on_its_field(lab: Lab) -> None:
    composer = bound(lab, {"pool-1-rollout_compile": "on"})

    assert not composer.is_valid()
    assert pool_form(composer, 1).errors["rollout_compile"] == [
        "rollout_compile compiles the static-cache forward: set rollout_cache to 'static', "
        "or turn rollout_compile off"
    ]


def test_rollout_compile_on_a_cpu_placement_is_refused_on_its_field(lab: Lab) -> None:
    composer = bound(lab, {"pool-1-rollout_cache": "static", "pool-1-rollout_compile": "on"})

    assert not composer.is_valid()
    assert pool_form(composer, 1).errors["rollout_compile"] == [
        "rollout_compile compiles on CUDA only and this policy gets no GPU: request GPUs in "
        "the resources, or turn rollout_compile off"
    ]
    assert not pool_form(composer, 0).errors and not pool_form(composer, 2).errors


def test_float16_on_a_cpu_placement_is_refused_on_its_field_and_bfloat16_accepted(
    lab: Lab,
) -> None:
    composer = bound(lab, {"pool-1-dtype": "float16"})

    assert not composer.is_valid()
    assert pool_form(composer, 1).errors["dtype"] == [
        "float16 needs a GPU and this policy gets none: on the CPU choose bfloat16 "
        "(autocast, no gradient scaler) or float32, or request GPUs in the resources"
    ]
    assert not pool_form(composer, 0).errors and not pool_form(composer, 2).errors

    composer = bound(lab, {"pool-1-dtype": "bfloat16"})
    assert composer.is_valid(), composer.has_errors()
    assert composer.config is not None
    assert [p["dtype"] for p in composer.config["pool"]] == ["float32", "bfloat16", "float32"]


@override_settings(PARTITIONS=GPU_PARTITIONS)
def test_float16_with_a_gpu_is_accepted(lab: Lab) -> None:
    composer = bound(
        lab,
        {
            "resources-backend": "slurm",
            "resources-partition": "gpu",
            "resources-gpus": "4",
            "pool-1-dtype": "float16",
        },
    )

    assert composer.is_valid(), composer.has_errors()
    assert composer.config is not None
    assert composer.config["pool"][1]["dtype"] == "float16"


@override_settings(PARTITIONS=GPU_PARTITIONS)
def test_rollout_compile_with_a_gpu_is_accepted(lab: Lab) -> None:
    composer = bound(
        lab,
        {
            "resources-backend": "slurm",
            "resources-partition": "gpu",
            "resources-gpus": "4",
            "pool-1-rollout_cache": "static",
            "pool-1-rollout_compile": "on",
        },
    )

    assert composer.is_valid(), composer.has_errors()
    assert composer.config is not None
    assert composer.config["pool"][1]["rollout_compile"] is True


@override_settings(PARTITIONS=GPU_PARTITIONS)
def test_more_gpus_than_the_partition_has_is_refused(lab: Lab) -> None:
    composer = bound(
        lab, {"resources-backend": "slurm", "resources-partition": "gpu", "resources-gpus": "16"}
    )

    assert not composer.is_valid()
    (message,) = composer.resources.errors["gpus"]
    assert message.startswith("more GPUs than the partition has: 'gpu' has 8 GPUs")


def test_gpus_on_a_cpu_partition_are_refused(lab: Lab) -> None:
    composer = bound(lab, {"resources-gpus": "1"})

    assert not composer.is_valid()
    assert composer.resources.errors["gpus"][0].startswith("more GPUs than the partition has")


@override_settings(PARTITIONS=GPU_PARTITIONS)
def test_gpus_that_do_not_split_over_nodes_are_refused(lab: Lab) -> None:
    composer = bound(
        lab, {"resources-backend": "slurm", "resources-partition": "gpu", "resources-gpus": "5"}
    )

    assert not composer.is_valid()
    assert "request 4 or 6" in composer.resources.errors["gpus"][0]


@override_settings(PARTITIONS=GPU_PARTITIONS)
def test_an_impossible_device_share_is_reported_on_the_policy(lab: Lab) -> None:
    composer = bound(
        lab,
        {
            "resources-backend": "slurm",
            "resources-partition": "gpu",
            "resources-gpus": "4",
            "pool-2-device_share": "1.5",
        },
    )

    assert not composer.is_valid()
    assert "neither a whole number" in pool_form(composer, 2).errors["device_share"][0]


@override_settings(PARTITIONS=GPU_PARTITIONS)
def test_cpus_and_memory_beyond_a_node_are_refused(lab: Lab) -> None:
    composer = bound(
        lab,
        {
            "resources-backend": "slurm",
            "resources-partition": "gpu",
            "resources-gpus": "4",
            "resources-cpus_per_gpu": "16",
            "resources-mem_gb": "512",
        },
    )

    assert not composer.is_valid()
    assert composer.resources.errors["cpus_per_gpu"][0].startswith("more CPUs than a node has")
    assert composer.resources.errors["mem_gb"][0].startswith("more memory than a node has")


MULTINODE = {"nodes": 2, "gpus_per_node": 0, "cpus_per_node": 2, "mem_gb_per_node": 8}


@pytest.fixture
def multinode(settings: Any) -> None:
    settings.PARTITIONS = {**settings.PARTITIONS, "multinode": MULTINODE}


ON_MULTINODE = {"resources-backend": "slurm", "resources-partition": "multinode"}


def test_several_nodes_on_the_local_partition_are_refused(lab: Lab) -> None:
    composer = bound(lab, {"resources-nodes": "2"})  # backend and partition "local"

    assert not composer.is_valid()
    # One message, the one that says what to do (not also the partition's capacity).
    assert composer.resources.errors["nodes"] == [
        "the local backend runs on this machine, one node: leave nodes empty, or choose "
        "backend 'slurm' and a partition with several nodes"
    ]


def test_several_nodes_on_the_local_backend_are_refused(lab: Lab, multinode: None) -> None:
    composer = bound(lab, {"resources-partition": "multinode", "resources-nodes": "2"})

    assert not composer.is_valid()
    assert composer.resources.errors["nodes"] == [
        "the local backend runs on this machine, one node: leave nodes empty, or choose "
        "backend 'slurm' and a partition with several nodes"
    ]


def test_one_node_or_none_on_the_local_backend_passes(lab: Lab) -> None:
    for nodes in ("", "1"):
        composer = bound(lab, {"resources-nodes": nodes})

        assert composer.is_valid(), composer.has_errors()
        assert composer.plan is not None and composer.plan.slurm.nodes == 1


def test_more_nodes_than_the_partition_has_are_refused(lab: Lab, multinode: None) -> None:
    composer = bound(lab, {**ON_MULTINODE, "resources-nodes": "3"})

    assert not composer.is_valid()
    assert composer.resources.errors["nodes"] == [
        "more nodes than the partition has: 'multinode' has 2; request at most 2 or choose "
        "another partition"
    ]


def test_a_two_node_cpu_job_spreads_the_pool_over_both_nodes(lab: Lab, multinode: None) -> None:
    # The built zoo's counts: qwen (149,184 parameters) opens node 0, llama (141,824) node
    # 1, and gpt2 (141,056) joins the lighter node 1.
    composer = bound(lab, {**ON_MULTINODE, "resources-nodes": "2"})

    assert composer.is_valid(), composer.has_errors()
    assert composer.plan is not None
    assert [(p.name, p.node) for p in composer.plan.policies] == [
        ("llama", 1),
        ("qwen", 0),
        ("gpt2", 1),
    ]
    assert sbatch_args(composer.plan.slurm)[:3] == [
        "--nodes=2",
        "--ntasks=4",
        "--ntasks-per-node=2",
    ]
    resources = composer.save_kwargs()["resources"]
    assert resources["nodes"] == 2
    assert [p["node"] for p in resources["placement"]["policies"]] == [1, 0, 1]
    assert resources["placement"]["slurm"]["tasks_per_node"] == [1, 2]


def test_more_nodes_than_policies_are_refused_on_the_nodes_field(lab: Lab, settings: Any) -> None:
    settings.PARTITIONS = {**settings.PARTITIONS, "multinode": {**MULTINODE, "nodes": 4}}
    composer = bound(lab, {**ON_MULTINODE, "resources-nodes": "4"})

    assert not composer.is_valid()
    (message,) = composer.resources.errors["nodes"]
    assert "4 nodes for 3 policies" in message and "request at most 3 node(s)" in message
    assert "gpus" not in composer.resources.errors


def test_duplicate_policy_names_are_refused(lab: Lab) -> None:
    composer = bound(lab, {"pool-2-name": "llama"})

    assert not composer.is_valid()
    (message,) = pool_form(composer, 2).errors["name"]
    assert message.startswith("duplicate policy name 'llama'")


def test_lambda_follows_the_trainers_range_at_least_zero_and_no_cap(lab: Lab) -> None:
    composer = bound(lab, {"sgt-lambda_sgt": "-0.1"})

    assert not composer.is_valid()
    assert section_form(composer, "sgt").errors["lambda_sgt"] == [
        "lambda_sgt must be >= 0; got -0.1"
    ]
    composer = bound(lab, {"sgt-lambda_sgt": "1.5"})  # the form capped it at 1; the trainer not
    assert composer.is_valid()
    assert composer.config is not None and composer.config["sgt"]["lambda_sgt"] == 1.5


def test_number_inputs_show_the_range_the_trainer_config_declares(lab: Lab) -> None:
    composer = ExperimentComposer(lab=lab)

    lambda_sgt = section_form(composer, "sgt")["lambda_sgt"]
    assert (lambda_sgt.field.widget.attrs["min"], "max" in lambda_sgt.field.widget.attrs) == (
        0,
        False,
    )
    fraction = section_form(composer, "remix").fields["replay_fraction"].widget.attrs
    assert (fraction["min"], fraction["max"]) == (0, 1)
    assert pool_form(composer, 0).fields["group_size"].widget.attrs["min"] == 2
    assert 'name="sgt-lambda_sgt" value="0.1" step="any" min="0"' in str(lambda_sgt)


@pytest.mark.skipif("remix" not in section_names(), reason="no ReMix section in this config")
def test_remix_fields_are_range_checked_when_remix_is_on(lab: Lab) -> None:
    composer = bound(lab, {"off_policy": "remix", "remix-replay_fraction": "1.0"})

    assert not composer.is_valid()
    (message,) = section_form(composer, "remix").errors["replay_fraction"]
    assert message == "replay_fraction (p) must be in [0, 1); got 1.0"
    # Off: the same value is ignored (the section keeps its defaults).
    composer = bound(lab, {"off_policy": "none", "remix-replay_fraction": "1.0"})
    assert composer.is_valid()


@pytest.mark.parametrize(
    ("seeds", "fragment"),
    [
        ("", "This field is required."),
        ("0, 1, 1", "duplicate seed 1"),
        ("0, -1", "'-1' is not one"),
        ("0, x", "'x' is not one"),
        (", ".join(str(i) for i in range(33)), "give 1 to 32 seeds"),
        ("99999999999", "too large"),
    ],
)
def test_bad_seeds_are_refused(lab: Lab, seeds: str, fragment: str) -> None:
    composer = bound(lab, {"seeds": seeds})

    assert not composer.is_valid()
    assert fragment in composer.form.errors["seeds"][0]


def test_seeds_and_tags_parse() -> None:
    assert parse_seeds("0, 1 2,3") == [0, 1, 2, 3]
    assert parse_tags("a, b, , a") == ["a", "b"]


@pytest.mark.parametrize(
    "value", ["25:00", "1-25:00:00", "00:00:00", "12:60:00", "12:00:00; rm -rf /", "tomorrow"]
)
def test_bad_time_limits_are_refused(lab: Lab, value: str) -> None:
    composer = bound(lab, {"resources-time_limit": value})

    assert not composer.is_valid()
    assert "time limit" in composer.resources.errors["time_limit"][0]


@pytest.mark.parametrize("value", ["12:00:00", "2-00:00:00", "100:00:00", "0:30:00"])
def test_good_time_limits_pass(lab: Lab, value: str) -> None:
    assert bound(lab, {"resources-time_limit": value}).is_valid()


@pytest.mark.parametrize(
    ("field", "value", "where", "fragment"),
    [
        ("name", "x; rm -rf /", "form", "is not a valid name"),
        ("name", "<script>alert(1)</script>", "form", "is not a valid name"),
        ("tags", "ok, $(reboot)", "form", "is not a valid tag"),
        ("resources-partition", "gpu; scancel -u root", "resources", "Select a valid choice"),
        ("resources-account", "lab && rm -rf ~", "resources", "is not a valid Slurm account"),
        ("resources-qos", "normal\n#SBATCH --exclusive", "resources", "not a valid Slurm qos"),
        ("pool-0-name", "a b`id`", "pool", "is not a valid name"),
    ],
)
def test_injection_looking_values_are_refused_with_field_errors(
    lab: Lab, field: str, value: str, where: str, fragment: str
) -> None:
    composer = bound(lab, {field: value})

    assert not composer.is_valid()
    name = field.split("-")[-1]
    form = {
        "form": composer.form,
        "resources": composer.resources,
        "pool": pool_form(composer, 0),
    }[where]
    assert fragment in " ".join(form.errors[name])


def test_local_backend_needs_the_local_partition(lab: Lab) -> None:
    with override_settings(PARTITIONS=GPU_PARTITIONS):
        composer = bound(lab, {"resources-partition": "gpu"})
        assert not composer.is_valid()
    assert "local backend runs on this machine" in composer.resources.errors["partition"][0]


# --- pre-filling -----------------------------------------------------------------------------
def test_an_existing_experiment_prefills_every_field_and_round_trips(lab: Lab, alice: User) -> None:
    composer, valid = compose(lab, sgt_data(ExperimentComposer(lab=lab)))
    assert valid
    experiment = services.experiment_create(owner=alice, lab=lab, **composer.save_kwargs())

    editing = ExperimentComposer(lab=lab, experiment=experiment)
    data = browser_data(editing)
    assert data["name"] == "sgt-three"
    assert data["regime"] == "sgt"
    assert data["seeds"] == "0, 1, 2"
    assert data["sgt-lambda_sgt"] == "0.2"
    assert data["pool-1-group_size"] == "4"
    assert data["pool-2-temperature"] == "0.7"
    assert data["pool-TOTAL_FORMS"] == "3"
    assert set(data["tags"].split(", ")) == {"sgt", "pilot"}
    assert data["task-levels"] == "1, 2, 3"

    again, valid = compose(lab, data, experiment=experiment)
    assert valid
    assert again.config == experiment.config
    assert again.save_kwargs()["resources"] == experiment.resources


def test_a_clone_prefills_a_copy_name_and_remembers_its_source(lab: Lab, alice: User) -> None:
    composer, _ = compose(lab, sgt_data(ExperimentComposer(lab=lab)))
    experiment = services.experiment_create(owner=alice, lab=lab, **composer.save_kwargs())

    data = browser_data(ExperimentComposer(lab=lab, clone_of=experiment))

    assert data["name"] == "sgt-three-copy"
    assert data["cloned_from"] == str(experiment.pk)
    assert data["pool-0-model"] == "zoo:tiny-llama-char"


# --- defaults and weight ---------------------------------------------------------------------
@override_settings(EXECUTOR="slurm", SLURM_PARTITION="gpu", PARTITIONS=GPU_PARTITIONS)
def test_resources_default_to_the_configured_slurm_partition() -> None:
    defaults = ResourcesForm.defaults()

    assert (defaults["backend"], defaults["partition"], defaults["gpus"]) == ("slurm", "gpu", 0)


def test_the_web_app_and_its_tasks_never_import_torch_or_transformers() -> None:
    """The web image has no torch: every URL's view, the Celery tasks and the regimes'
    declarations (read by the forms, the run page and the API) must do without it."""
    code = (
        "import django, sys; django.setup(); import webapp.urls, scheduler.tasks; "
        "assert not {'torch', 'transformers'} & set(sys.modules), 'heavy import'"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[3],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "webapp.settings"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_a_field_with_choices_in_its_metadata_is_a_select() -> None:
    """sequential_sft.sft_from lists its choices in its metadata (its help explains them)."""
    from trainer.regimes.sequential_sft import SequentialSFTConfig
    from webapp.core.configform import build_field, config_fields

    spec = next(f for f in config_fields(SequentialSFTConfig) if f.name == "sft_from")
    assert spec.choices == ("rl", "base")
    field = build_field(spec)
    assert [value for value, _ in field.choices if value] == ["rl", "base"]
