"""The compose page's "Import config JSON" box, and what is wrong with an imported config."""

from __future__ import annotations

import json
from typing import Any

from django import forms

from trainer.config import MAX_POOL, ConfigError, RunConfig
from webapp.core.configform import MAX_CONFIG_INT, tag_fields
from webapp.registry.task_data import task_data_problems

MAX_IMPORT_BYTES = 1_000_000
MAX_IMPORT_DEPTH = 32


class ConfigImportForm(forms.Form):
    """The compose page's "Import config JSON" box: a trainer config file, or pasted JSON.

    Only checks that it is a JSON object (UTF-8, at most 1 MB, no lone surrogates, not
    nested absurdly); :func:`config_problems` and the composer check the config itself.
    """

    use_required_attribute = False

    config_file = forms.FileField(
        required=False,
        label="Config file",
        help_text="A trainer config JSON, as `python -m trainer validate` reads it",
    )
    config_json = forms.CharField(
        required=False,
        strip=False,
        max_length=MAX_IMPORT_BYTES,
        label="or paste it",
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.config: dict[str, Any] | None = None
        tag_fields(self, raw_labels=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.errors:
            return data
        upload, text = data.get("config_file"), data.get("config_json") or ""
        if upload is not None and text.strip():
            self.add_error("config_json", "import a file or pasted JSON, not both")
            return data
        field = "config_file" if upload is not None else "config_json"
        if upload is not None:
            if upload.size > MAX_IMPORT_BYTES:
                self.add_error(field, f"the file is larger than {MAX_IMPORT_BYTES} bytes")
                return data
            try:
                text = upload.read().decode("utf-8-sig")
            except UnicodeDecodeError:
                self.add_error(field, "the file is not UTF-8 text")
                return data
        if not text.strip():
            self.add_error(field, "choose a config file or paste its JSON")
            return data
        try:
            config = json.loads(text)
        except (ValueError, RecursionError) as error:
            self.add_error(field, f"not valid JSON: {str(error)[:200]}")
            return data
        problem = _json_problem(config)
        if problem:
            self.add_error(field, problem)
        else:
            self.config = config
        return data


def _json_problem(config: Any) -> str | None:
    """Why ``config`` cannot even be shown in the form, or None."""
    if not isinstance(config, dict):
        return f"a trainer config is a JSON object ({{...}}), not {type(config).__name__}"
    stack: list[tuple[Any, int]] = [(config, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_IMPORT_DEPTH:
            return f"nested more than {MAX_IMPORT_DEPTH} levels deep"
        if isinstance(value, dict):
            stack += [(key, depth) for key in value]
            stack += [(item, depth + 1) for item in value.values()]
        elif isinstance(value, list):
            stack += [(item, depth + 1) for item in value]
        elif isinstance(value, str) and not _is_unicode(value):
            return "a string holds a lone surrogate (an unpaired \\udXXX escape)"
    return None


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def config_problems(config: dict[str, Any]) -> dict[str, str]:
    """What is wrong with an imported trainer config, by config path (``pool[1].lr``), all
    of it at once: what the form refuses before the trainer ever looks (integers beyond 32
    bits, more than ``MAX_POOL`` policies), what is wrong with the task's data paths
    (:func:`task_data_problems`) and what ``RunConfig.from_dict`` reports (unknown fields
    and wrong types with every range and rule), a path's first message only."""
    problems = _oversized(config, "")
    pool = config.get("pool")
    if isinstance(pool, list) and len(pool) > MAX_POOL:
        problems["pool"] = f"a pool has 1 to {MAX_POOL} policies; this one has {len(pool)}"
    found = dict(task_data_problems(config.get("task")))
    try:
        RunConfig.from_dict(config)
    except ConfigError as error:
        found.update(error.errors)
    for path, message in found.items():
        problems.setdefault(path, message)
    return problems


def _oversized(value: Any, path: str) -> dict[str, str]:
    if type(value) is int and not -MAX_CONFIG_INT - 1 <= value <= MAX_CONFIG_INT:
        return {path: f"out of range: at most {MAX_CONFIG_INT}"}
    found: dict[str, str] = {}
    if isinstance(value, dict):
        for key, item in value.items():
            found.update(_oversized(item, f"{path}.{key}" if path else str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.update(_oversized(item, f"{path}[{index}]"))
    return found
