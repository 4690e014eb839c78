"""The run page's "Evaluate" form: a suite of the lab, the checkpoints, the base models."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from webapp.evals.evaluations import steps_problem
from webapp.registry.models import EvalSuite
from webapp.runs.models import Run


class EvaluateForm(forms.Form):
    """What to evaluate: ``suite`` on the chosen ``checkpoints`` of the run (default its
    final one) and, with ``include_base``, the pool's base models. ``cleaned_data["steps"]``
    is the job's ``--steps`` (``N[,N...]`` or ``none``)."""

    use_required_attribute = False

    suite = forms.ModelChoiceField(
        queryset=EvalSuite.objects.none(),
        empty_label=None,
        error_messages={
            "required": "Choose a suite.",
            "invalid_choice": "No such suite in your lab.",
        },
    )
    checkpoints = forms.TypedMultipleChoiceField(
        coerce=int,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="The run keeps its last checkpoints only",
        error_messages={"invalid_choice": "The run has no checkpoint at step %(value)s."},
    )
    include_base = forms.BooleanField(
        required=False, initial=True, label="Base models too (recorded at step 0)"
    )

    def __init__(self, *args: Any, run: Run, steps: list[int], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.run = run
        self.available = steps
        self.fields["suite"].queryset = EvalSuite.objects.filter(lab=run.experiment.lab_id)
        self.fields["checkpoints"].choices = [
            (step, f"step {step}" + (" (final)" if step == steps[-1] else "")) for step in steps
        ]
        self.fields["checkpoints"].initial = steps[-1:]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        chosen = sorted(set(data.get("checkpoints") or []))
        steps = ",".join(str(step) for step in chosen) or "none"
        problem = steps_problem(steps, self.available, bool(data.get("include_base")))
        if problem:
            raise ValidationError(problem[0].upper() + problem[1:] + ".")
        data["steps"] = steps
        return data
