"""The model registry's entry form."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from webapp.core.configform import tag_fields
from webapp.core.models import Lab
from webapp.registry.forms.common import check_name, checked_tokenizer
from webapp.registry.models import ModelEntry
from webapp.registry.services import ENTRY_FIELDS
from webapp.registry.sources import source_problem

FAMILY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class ModelEntryForm(forms.ModelForm):
    """A registry entry: name unique in the lab, a source that exists, sizes that make sense."""

    use_required_attribute = False

    class Meta:
        model = ModelEntry
        fields = list(ENTRY_FIELDS)
        widgets = {
            "chat_template": forms.Textarea(attrs={"rows": 4}),
            "notes": forms.Textarea(attrs={"rows": 3}),
        }

    def __init__(self, *args: Any, lab: Lab, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lab = lab
        self.fields["parameter_count"].validators.append(_at_least_one)
        self.fields["source"].help_text = (
            "'zoo:<id>' for a tiny-zoo model, or the absolute path of a local Hugging Face "
            "model directory (with config.json)"
        )
        tag_fields(self, raw_labels=False)

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        check_name(name)
        clash = ModelEntry.objects.filter(lab=self.lab, name=name)
        if self.instance.pk:
            clash = clash.exclude(pk=self.instance.pk)
        if clash.exists():
            raise ValidationError(
                f"the lab's registry already has a model named {name!r}; choose another name",
                code="duplicate",
            )
        return name

    def clean_source(self) -> str:
        source = self.cleaned_data["source"].strip()
        problem = source_problem(source)
        if problem:
            raise ValidationError(problem, code="bad_source")
        return source

    def clean_tokenizer(self) -> str:
        return checked_tokenizer(self.cleaned_data.get("tokenizer", ""))

    def clean_family(self) -> str:
        value = self.cleaned_data.get("family", "").strip()
        if value and not FAMILY.match(value):
            raise ValidationError(
                f"{value!r} is not a family name: use e.g. llama, qwen2, gpt2", code="invalid"
            )
        return value


def _at_least_one(value: int | None) -> None:
    if value is not None and value < 1:
        raise ValidationError(
            f"parameter_count must be at least 1; got {value} (leave it blank to estimate it "
            "from the model's config.json)",
            code="min_value",
        )
