"""The metric catalogue: every key the trainer logs has a name, a unit and a chart group,
and the run page's groups and names come from it."""

from __future__ import annotations

import ast
import functools
import importlib
import re
from pathlib import Path

from trainer import metrics as m
from trainer.regimes import BUILT_IN
from webapp.metrics.catalogue import groups_as_json, metric_groups, metrics_as_json

TRAINER = Path(__file__).resolve().parents[3] / "trainer"
KEY = re.compile(r"[a-z][a-z0-9_]*(?:/[a-z0-9_@.]+)+")  # "thl/mass_error", "val/reward@1/x"


def _metrics_aliases(tree: ast.Module) -> set[str]:
    """The names a module binds ``trainer.metrics`` to (``from trainer import metrics as m``)."""
    aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "trainer":
            aliases |= {a.asname or a.name for a in node.names if a.name == "metrics"}
    return aliases


def _key_literals(node: ast.AST) -> list[ast.expr]:
    """The expressions ``node`` uses as mapping keys: dict display keys, subscripts."""
    if isinstance(node, ast.Dict):
        return [key for key in node.keys if key is not None]
    if isinstance(node, ast.Subscript):
        return [node.slice]
    return []


@functools.cache
def logged_keys() -> tuple[frozenset[str], frozenset[str]]:
    """Statically, the metric keys in the trainer's code: every key constant of
    :mod:`trainer.metrics` and of each built-in regime's declaration, every ``m.NAME`` it
    is used by, every string literal key like "thl/mass_error"; and, apart, the f-string
    keys (a family: "sgt/{x}"), with each formatted part as "x"."""
    declarations = [importlib.import_module(f"trainer.regimes.{spec.name}") for spec in BUILT_IN]
    keys = {
        value
        for module in (m, *declarations)
        for name, value in vars(module).items()
        if name.isupper() and isinstance(value, str) and KEY.fullmatch(value)
    }
    families: set[str] = set()
    for path in TRAINER.rglob("*.py"):
        if path.name == "metrics.py":
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        aliases = _metrics_aliases(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
            ):
                value = getattr(m, node.attr)
                if isinstance(value, str) and KEY.fullmatch(value):
                    keys.add(value)
            for key in _key_literals(node):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    if KEY.fullmatch(key.value):
                        keys.add(key.value)
                elif isinstance(key, ast.JoinedStr):
                    sample = "".join(
                        str(part.value) if isinstance(part, ast.Constant) else "x"
                        for part in key.values
                    )
                    if KEY.fullmatch(sample):
                        families.add(sample)
    return frozenset(keys), frozenset(families)


def test_the_scan_finds_the_keys_the_trainer_logs() -> None:
    keys, families = logged_keys()
    assert {m.VAL_REWARD_AT_1, m.REMIX_REPLAY_SIZE, "thl/mass_error", m.LR} <= keys
    assert {"val/reward@1/x", "prp/is_weight_mean/x"} <= families  # per-skill keys
    assert m.POOL not in keys


def test_every_key_the_trainer_logs_has_a_chart_group_and_a_name() -> None:
    keys, families = logged_keys()
    charted = {key for group in metric_groups() for key in group.keys}
    assert sorted(keys - charted) == []
    assert sorted(keys - set(m.catalogue().by_key)) == []
    for key in keys:
        info = m.catalogue().by_key[key]
        assert info.label != key and info.label[0].isupper(), key
        assert info.group in m.GROUPS, key
    for sample in families:  # a key with a variable part needs a family in the catalogue
        assert any(pattern.fullmatch(sample) for pattern, *_ in m.catalogue().families), sample


def test_the_catalogue_names_each_key_once_in_a_known_group() -> None:
    assert len(m.catalogue().by_key) == len(m.catalogue().entries)
    assert len({info.label for info in m.catalogue().entries}) == len(m.catalogue().entries)
    assert {info.group for info in m.catalogue().entries} == set(m.GROUPS)


def test_describe_names_units_and_falls_back_by_prefix() -> None:
    assert m.describe(m.VAL_REWARD_AT_1).label == "Validation reward@1"
    assert m.axis_label(m.VAL_REWARD_AT_1) == "Validation reward@1"
    assert m.axis_label(m.STEP_S) == "Step time (s)"
    assert m.describe(m.TOKENS_PER_S).unit == "tokens/s"
    unknown = m.describe("sgt/new_thing")
    assert (unknown.label, unknown.unit, unknown.group) == ("sgt/new_thing", "", m.SHARING)
    assert m.describe("custom/loss").group == m.OTHER


def test_pool_is_shown_as_pool_mean() -> None:
    assert m.policy_label(m.POOL) == "pool mean"
    assert m.policy_label(m.POOL, m.VAL_REWARD_AT_1) == "pool mean"
    assert m.policy_label(m.POOL, m.STEP_S) == "pool max"
    assert m.policy_label("qwen-bpe") == "qwen-bpe"


def test_the_run_page_json_comes_from_the_catalogue() -> None:
    groups = groups_as_json()
    assert groups[0] == {
        "slug": "rewards",
        "title": "Rewards",
        "keys": [
            m.TRAIN_REWARD_MEAN,
            m.VAL_REWARD_AT_1,
            m.TRAIN_ACCURACY,
            m.VAL_DISCRIMINATION_CARRY,
            m.VAL_DISCRIMINATION_OVERFLOW,
        ],
    }
    remix = next(group for group in groups if group["slug"] == "remix")
    assert m.REMIX_REPLAY_SIZE in remix["keys"]  # it had no group before the catalogue
    names = metrics_as_json()
    assert names[m.VAL_REWARD_AT_1] == {
        "label": "Validation reward@1",
        "unit": "",
        "group": "rewards",
    }
    assert names[m.TOKENS_PER_S] == {
        "label": "Throughput",
        "unit": "tokens/s",
        "group": "throughput",
    }
    assert set(names) == {key for group in groups for key in group["keys"]}  # type: ignore[attr-defined]
