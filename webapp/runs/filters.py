"""The filter bar of the experiments and runs lists (GET parameters, validated).

The sort control always shows the order the list is in: without a ``sort`` (a first
visit, or a filter link without one) it shows the default, and an unknown ``sort`` is
reported and shown as the default the list falls back to. (It used to show its first
choice, "created ↑", over a newest-first list, so a Filter submit flipped the order.)
"""

from __future__ import annotations

from django import forms
from django.http import QueryDict

from webapp.core.configform import regime_choices
from webapp.runs.models import Run
from webapp.runs.selectors import DEFAULT_SORT, EXPERIMENT_SORTS, RUN_SORTS, ListFilters

# How each column reads ascending and descending (default: ↑ / ↓).
_DIRECTIONS = {
    "created": ("oldest first", "newest first"),
    "name": ("A → Z", "Z → A"),
    "owner": ("A → Z", "Z → A"),
    "step": ("fewest first", "most first"),
    "runs": ("fewest first", "most first"),
}


def _sort_choices(columns: dict[str, str]) -> list[tuple[str, str]]:
    choices = []
    for name in columns:
        up, down = _DIRECTIONS.get(name, ("↑", "↓"))
        choices += [(name, f"{name}, {up}"), (f"-{name}", f"{name}, {down}")]
    return choices


class ListFilterForm(forms.Form):
    """Invalid values are reported next to the field and ignored (the list still shows)."""

    q = forms.CharField(required=False, max_length=64, label="Name contains")
    owner = forms.CharField(required=False, max_length=150)
    regime = forms.ChoiceField(required=False, choices=())  # set when built: the registry's
    state = forms.ChoiceField(required=False, choices=[("", "any"), *Run.State.choices])
    tag = forms.CharField(required=False, max_length=48)
    sort = forms.ChoiceField(required=False, label="Sort by", initial=DEFAULT_SORT)

    def __init__(self, data: QueryDict | None, *, sorts: dict[str, str]) -> None:
        choices = _sort_choices(sorts)
        self.bad_sort = ""
        if data is not None and data.get("sort", "") not in {value for value, _ in choices}:
            data = data.copy()
            self.bad_sort = data.get("sort", "")
            data["sort"] = DEFAULT_SORT  # what the list falls back to, shown as such
        super().__init__(data)
        self.fields["sort"].choices = choices  # type: ignore[attr-defined]
        self.fields["regime"].choices = [("", "any"), *regime_choices()]  # type: ignore[attr-defined]

    def filters(self) -> ListFilters:
        """The valid part of the request (an unbound form: no filters)."""
        if not self.is_bound:
            return ListFilters()
        self.is_valid()  # fills cleaned_data with the valid fields, errors with the rest
        if self.bad_sort:
            self.add_error(
                "sort",
                f"Select a valid choice. “{self.bad_sort[:32]}” is not one of the available "
                "choices; sorted by the default.",
            )
        return ListFilters(**{name: value for name, value in self.cleaned_data.items() if value})


def experiment_filter_form(data: QueryDict | None) -> ListFilterForm:
    return ListFilterForm(data, sorts=EXPERIMENT_SORTS)


def run_filter_form(data: QueryDict | None) -> ListFilterForm:
    return ListFilterForm(data, sorts=RUN_SORTS)
