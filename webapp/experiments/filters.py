"""The filter bar of the experiments and runs lists (GET parameters, validated)."""

from __future__ import annotations

from django import forms

from trainer.config import REGIMES
from webapp.experiments.models import Run
from webapp.experiments.selectors import EXPERIMENT_SORTS, RUN_SORTS, ListFilters


def _sort_choices(columns: dict[str, str]) -> list[tuple[str, str]]:
    choices = []
    for name in columns:
        choices += [(name, f"{name} ↑"), (f"-{name}", f"{name} ↓")]
    return choices


class ListFilterForm(forms.Form):
    """Invalid values are reported next to the field and ignored (the list still shows)."""

    q = forms.CharField(required=False, max_length=64, label="Name contains")
    owner = forms.CharField(required=False, max_length=150)
    regime = forms.ChoiceField(required=False, choices=[("", "any"), *((r, r) for r in REGIMES)])
    state = forms.ChoiceField(required=False, choices=[("", "any"), *Run.State.choices])
    tag = forms.CharField(required=False, max_length=48)
    sort = forms.ChoiceField(required=False)

    def __init__(self, *args: object, sorts: dict[str, str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["sort"].choices = _sort_choices(sorts)  # type: ignore[attr-defined]

    def filters(self) -> ListFilters:
        """The valid part of the request (an unbound form: no filters)."""
        if not self.is_bound:
            return ListFilters()
        self.is_valid()  # fills cleaned_data with the valid fields, errors with the rest
        return ListFilters(**{name: value for name, value in self.cleaned_data.items() if value})


def experiment_filter_form(data: object) -> ListFilterForm:
    return ListFilterForm(data, sorts=EXPERIMENT_SORTS)


def run_filter_form(data: object) -> ListFilterForm:
    return ListFilterForm(data, sorts=RUN_SORTS)
