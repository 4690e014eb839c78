"""The config sections' forms: generated from their dataclasses
(:func:`webapp.core.configform.section_form_class`), a few with checks of their own."""

from __future__ import annotations

from typing import Any

from django import forms

from webapp.core.configform import ConfigForm, section_form_class
from webapp.registry.task_data import task_data_problems


class TaskSectionForm(section_form_class("task")):  # type: ignore[misc]
    """The task section: the generated fields, and its data paths checked against the
    disk and ``settings.TASK_DATA_DIRS`` (:mod:`webapp.registry.task_data`). The system
    prompt is a text area (an instruct model's is often a few sentences, or lines)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields.get("system_prompt")
        if field is not None:
            field.widget = forms.Textarea(attrs={**field.widget.attrs, "rows": 4})

    def clean_system_prompt(self) -> str:
        """The prompt with the browser's line breaks (CR LF) as the trainer's (LF)."""
        return str(self.cleaned_data.get("system_prompt") or "").replace("\r\n", "\n")

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
