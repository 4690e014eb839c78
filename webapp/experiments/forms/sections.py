"""The config sections' forms: generated from their dataclasses
(:func:`webapp.experiments.configform.section_form_class`), a few with checks of their own."""

from __future__ import annotations

from typing import Any

from webapp.experiments.configform import ConfigForm, section_form_class
from webapp.experiments.task_data import task_data_problems


class TaskSectionForm(section_form_class("task")):  # type: ignore[misc]
    """The task section: the generated fields, and its data paths checked against the
    disk and ``settings.TASK_DATA_DIRS`` (:mod:`webapp.experiments.task_data`)."""

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        task = {"kind": data.get("kind"), **{n: data.get(n) for n in ("train_path", "val_path")}}
        for path, message in task_data_problems(task).items():
            name = path.removeprefix("task.")
            if name in data and name not in self.errors:
                self.add_error(name, message)
        return data


SECTION_FORMS: dict[str, type[ConfigForm]] = {"task": TaskSectionForm}
"""Sections whose form adds checks to the generated one."""


def section_form(name: str) -> type[ConfigForm]:
    """The form class of config section ``name`` (built now from its dataclass, unless
    :data:`SECTION_FORMS` has one)."""
    return SECTION_FORMS.get(name) or section_form_class(name)
