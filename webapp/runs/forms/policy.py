"""The policy pool: one form per policy (PolicyConfig's fields; its model resolved
against the lab's registry), in a formset the page orders and trims."""

from __future__ import annotations

from typing import Any

from django import forms
from django.forms import formset_factory

from trainer.config import MAX_POOL, PolicyConfig
from webapp.core.configform import ConfigForm
from webapp.registry.forms.common import checked_tokenizer
from webapp.registry.sources import ModelResolver, ResolvedModel


class PolicyForm(ConfigForm):
    """One policy of the pool; its fields are PolicyConfig's."""

    config_class = PolicyConfig
    ADVANCED = ("tokenizer", "chat_template")
    MAIN = ("name", "model")

    model = forms.CharField(
        max_length=1000,
        help_text="A model registry name, 'zoo:<id>', or an absolute local HF model directory",
    )
    tokenizer = forms.CharField(
        required=False,
        max_length=1000,
        help_text="Local tokenizer directory; blank: the registry entry's or the model's",
    )
    chat_template = forms.CharField(
        required=False,
        max_length=100_000,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Jinja chat template; blank: the registry entry's or the tokenizer's",
    )

    def __init__(self, *args: Any, resolver: ModelResolver | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resolver = resolver or ModelResolver(None)
        self.resolved: ResolvedModel | None = None
        self.number: int | None = None  # its position on screen, "Policy 2" (None: removed)
        self.fields["model"].widget.attrs["list"] = "model-suggestions"
        self.fields["name"].widget.attrs["autocomplete"] = "off"

    def clean_model(self) -> str:
        text = self.cleaned_data["model"].strip()
        self.resolved = self.resolver.resolve(text)
        return text

    def clean_tokenizer(self) -> str:
        return checked_tokenizer(self.cleaned_data.get("tokenizer", ""))

    @property
    def index(self) -> str:
        """The form's index in the formset (``__prefix__`` for the empty form)."""
        return (self.prefix or "").rsplit("-", 1)[-1]

    def main_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.MAIN]

    def number_fields(self) -> list[forms.BoundField]:
        skip = {*self.MAIN, *self.ADVANCED}
        return [self[name] for name in self.config_specs if name not in skip]

    def advanced_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.ADVANCED if name in self.fields]

    def to_policy(self) -> dict[str, Any]:
        """The policy's trainer JSON (a registry entry supplies tokenizer/chat template).

        Also for a form with problems (the composer checks the rest of the config in the
        same round): a field that failed is left out, a model not found stays as typed."""
        policy = self.config_values()
        if self.resolved is None:
            typed = str(self["model"].value() or "").strip()
            policy["model"] = typed or policy.get("model", "")
            return policy
        policy["model"] = self.resolved.source
        policy["tokenizer"] = policy.get("tokenizer") or self.resolved.tokenizer
        policy["chat_template"] = policy.get("chat_template") or self.resolved.chat_template
        return policy


class BasePolicyFormSet(forms.BaseFormSet):
    """The pool: 1..MAX_POOL policies, orderable and deletable in the browser."""

    default_error_messages = {
        "too_many_forms": "a pool has at most %(num)d policies; remove one",
        "too_few_forms": "add at least %(num)d policy to the pool",
    }

    def add_fields(self, form: forms.Form, index: int | None) -> None:
        super().add_fields(form, index)
        form.fields["ORDER"].widget.attrs.update(
            {"data-role": "order", "data-testid": form.add_prefix("ORDER")}
        )
        form.fields["DELETE"].widget.attrs.update(
            {"data-role": "delete", "data-testid": form.add_prefix("DELETE")}
        )

    def visible_forms(self) -> list[PolicyForm]:
        """The kept policies in their chosen order (the config's ``pool`` order)."""
        return list(self.ordered_forms)  # type: ignore[arg-type]


PolicyFormSet = formset_factory(
    PolicyForm,
    formset=BasePolicyFormSet,
    extra=0,
    min_num=1,
    max_num=MAX_POOL,
    absolute_max=2 * MAX_POOL,
    validate_min=True,
    validate_max=True,
    can_order=True,
    can_delete=True,
)
