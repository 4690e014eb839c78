"""The compose page as one service: every form of an experiment, validated together into
one trainer config and an MWRA placement plan (SPEC 4.6).

:class:`ExperimentComposer` bundles the general form (name, regime, schedule, seeds...),
one section form per config section (built from the trainer dataclasses and the regime
registry when the page is built, :mod:`webapp.core.configform`), the resources
form and the policy pool formset (:mod:`webapp.runs.forms`). It validates them
field by field, builds the trainer JSON of every field that passed, validates it with
``RunConfig.from_dict`` (types, every field's declared range, the cross-field rules) and
puts every ``ConfigError`` message next to the field it names, flags each zoo model that
is not built (with its build command) and plans the placement with MWRA: all in one
round, so one Preview shows every problem, none waits for another to be fixed.
The views bind it to the request, ask :meth:`ExperimentComposer.is_valid` and hand
:meth:`ExperimentComposer.save_kwargs` to ``services.experiment_create`` / ``_update``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from django import forms
from django.http import QueryDict
from django.utils.datastructures import MultiValueDict

from trainer.config import OFF_POLICY, ConfigError, RunConfig
from trainer.mwra import PlacementError, PlacementPlan, PolicyDemand, plan_placement
from trainer.mwra_counting import ParameterCount
from trainer.regimes import regime_names
from webapp.core.configform import (
    ConfigForm,
    path_title,
    readable_message,
    section_names,
    section_switch,
    section_title,
)
from webapp.core.digits import ascii_digits
from webapp.core.models import Lab
from webapp.registry.sources import ModelResolver, zoo_build_problem
from webapp.registry.zoo_builds import zoo_root
from webapp.runs.compose_sizes import (
    ACKNOWLEDGE_LABEL,
    SizeReport,
    StepRateSource,
    largest_model,
    size_report,
)
from webapp.runs.forms import ExperimentForm, PolicyForm, PolicyFormSet, ResourcesForm, section_form
from webapp.runs.models import Experiment
from webapp.runs.prompt_fit import prompt_fit_problems
from webapp.runs.services import copy_name

DEFAULT_POOL = (
    {"name": "llama-char", "model": "zoo:tiny-llama-char"},
    {"name": "qwen-bpe", "model": "zoo:tiny-qwen-bpe"},
)
"""A new experiment starts with two tiny-zoo policies of different tokenizers."""


@dataclass
class Section:
    """One config section on the page (``grpo``, ``task``, ``sgt``...)."""

    name: str
    title: str
    description: str
    switch: str | None  # "regime" / "off_policy": shown only when that choice is `name`
    form: ConfigForm
    relevant: bool

    @property
    def show_when(self) -> str:
        return self.name if self.switch else ""


@dataclass(frozen=True)
class ErrorLink:
    """One line of the error summary: a message and the id of what it is about."""

    target: str  # an element id: a field's (``id_pool-1-lr``), a section's, ``pool``
    title: str  # the field as the page names it, "Policy 2 · Learning rate"; or ""
    message: str


@dataclass
class PlanRow:
    name: str
    parameters: ParameterCount
    node: int | None
    devices: str
    memory_fraction: float | None


class ExperimentComposer:
    """All the forms of the experiment page, validated together into one trainer config.

    ``experiment`` pre-fills from a stored experiment (edit); ``clone_of`` pre-fills from
    another one as a new draft (create). After :meth:`is_valid`, ``config`` is the exact
    trainer JSON, ``plan`` the MWRA placement and :meth:`save_kwargs` the arguments of
    ``services.experiment_create`` / ``experiment_update``.
    """

    def __init__(
        self,
        data: MultiValueDict[str, Any] | None = None,
        *,
        lab: Lab | None,
        experiment: Experiment | None = None,
        clone_of: Experiment | None = None,
        initial: dict[str, Any] | None = None,
        step_rate: StepRateSource | None = None,
    ) -> None:
        self.resolver = ModelResolver(lab)
        self.step_rate = step_rate
        self.is_bound = data is not None
        self.data = data
        base = experiment or clone_of
        if initial is None:
            initial = (
                _initial_from(base, self.resolver, clone=experiment is None)
                if base
                else _default_initial()
            )
        self.form = ExperimentForm(data, initial=initial["main"])
        self.resources = ResourcesForm(data, initial=initial["resources"], prefix="resources")
        self.pool = PolicyFormSet(
            data, initial=initial["pool"], prefix="pool", form_kwargs={"resolver": self.resolver}
        )
        for number, form in enumerate(self._kept_policies(), start=1):
            form.number = number
        choice = {
            "regime": self._choice(data, "regime", initial["main"]),
            "off_policy": self._choice(data, "off_policy", initial["main"]),
        }
        self.sections: list[Section] = []
        for name in section_names():
            switch = section_switch(name)
            relevant = switch is None or choice[switch] == name
            form_class = section_form(name)
            section_initial = initial["sections"].get(name, {})
            if data is not None and relevant:
                form = form_class(data, initial=section_initial, prefix=name)
            elif data is not None:
                # Irrelevant: keep what was typed on screen, validate nothing, use defaults.
                form = form_class(initial=_raw_values(form_class, data, name), prefix=name)
            else:
                form = form_class(initial=section_initial, prefix=name)
            title, description = section_title(name)
            self.sections.append(Section(name, title, description, switch, form, relevant))
        self.config: dict[str, Any] | None = None
        self.plan: PlacementPlan | None = None
        self.sizes: SizeReport | None = None
        """Preview's size estimate and warnings of a valid config (is_valid)."""
        self.sizes_refused = False
        """Whether Save was refused for warnings not acknowledged (the views set it)."""
        self.parameters: list[ParameterCount] = []
        self.visible: list[PolicyForm] = []
        self._field_errors: set[tuple[int, str]] = set()
        """(form id, field name) of the fields their own checks refused (is_valid)."""
        self._pool_refused = False
        """Whether the pool formset refused the pool itself (too few or many policies)."""

    @staticmethod
    def _choice(data: Any, name: str, initial: dict[str, Any]) -> str:
        """The regime / off-policy method chosen (submitted, else initial; a value that is
        none of the options reads as the default, whose sections then show)."""
        options = regime_names() if name == "regime" else OFF_POLICY
        value = data.get(name) if data is not None else initial.get(name)
        if value in options:
            return str(value)
        default = RunConfig.__dataclass_fields__[name].default
        return str(default) if default in options else options[0]

    @classmethod
    def from_config(
        cls, config: dict[str, Any], *, lab: Lab | None, experiment: Experiment | None = None
    ) -> ExperimentComposer:
        """A bound composer whose fields hold an imported trainer config, as if typed in
        (resources at their defaults; an edited experiment keeps its description, notes,
        tags, seeds and resources); :meth:`is_valid` then checks it like any other."""
        resolver = ModelResolver(lab)
        initial = _initial_from_config(config, resolver)
        if experiment is not None:
            kept = _initial_from(experiment, resolver, clone=False)
            initial["resources"] = kept["resources"]
            for name in ("description", "notes", "tags", "seeds"):
                initial["main"][name] = kept["main"][name]
        page = cls(None, lab=lab, initial=initial)
        return cls(page.as_data(), lab=lab, experiment=experiment)

    def as_data(self) -> QueryDict:
        """What the browser submits for this page as rendered (every field's value)."""
        data = QueryDict(mutable=True)
        forms_ = [
            self.form,
            self.resources,
            *(section.form for section in self.sections),
            self.pool.management_form,
            *self.pool.forms,
        ]
        for form in forms_:
            for field in form:
                value = field.value()
                if field.widget_type == "checkbox":
                    if value:
                        data[field.html_name] = "on"
                else:
                    data[field.html_name] = "" if value is None else str(value)
        return data

    def attach_config_errors(self, errors: dict[str, str]) -> None:
        """Show ``ConfigError``-style messages (path -> message) next to their fields, after
        :meth:`is_valid`; a message already shown is not repeated."""
        if errors:
            self.config = self.plan = None  # no preview of a config with problems
        shown = {str(message) for form in self._all_forms() for message in _messages(form)}
        shown.update(str(message) for message in self.pool.non_form_errors())
        self.visible = self.visible or list(self.pool.forms)
        relevant = {section.name for section in self.sections if section.relevant}
        for path, message in errors.items():
            if message in shown or readable_message(message) in shown:
                continue
            head = re.split(r"[.\[]", path, maxsplit=1)[0]
            if head in {section.name for section in self.sections} - relevant:
                # A hidden section has no bound form to hold the message.
                self.form.add_error(None, f"{path_title(path)}: {readable_message(message)}")
            else:
                self._attach(path, message, imported=True)

    def _all_forms(self) -> list[forms.BaseForm]:
        return [
            self.form,
            self.resources,
            *(s.form for s in self.sections if s.relevant),
            *self.pool.forms,
        ]

    # --- validation ---------------------------------------------------------------------
    def is_valid(self) -> bool:
        """Check everything at once: every form's fields, then the trainer config built
        from every field that passed (``RunConfig.from_dict``: ranges and cross-field
        rules; a field with a message of its own is left at its default there and gets no
        second one), the zoo models not built here, and the MWRA placement when the
        resources and models it needs are readable. No stage waits for another to pass:
        one Preview lists every problem."""
        if not self.is_bound:
            return False
        valid = self.form.is_valid()
        valid = self.resources.is_valid() and valid
        pool_valid = self.pool.is_valid()
        valid = pool_valid and valid
        for section in self.sections:
            if section.relevant:
                valid = section.form.is_valid() and valid
        # Fixed now: attaching config errors below makes the formset invalid.
        self.visible = self.pool.visible_forms() if pool_valid else self._checked_policies()
        self._field_errors = {
            (id(form), name) for form in self._all_forms() for name in form.errors
        }
        self._pool_refused = bool(self.pool.non_form_errors())
        config = self._build_config()
        config_errors: dict[str, str] = {}
        try:
            RunConfig.from_dict(config)
        except ConfigError as error:
            config_errors = error.errors
            for path, message in config_errors.items():
                self._attach(path, message)
            valid = False
        for path, message in self._zoo_problems().items():
            self._attach(path, message)
            valid = False
        if self._can_plan():
            try:
                self.plan = self._plan(config["pool"])
            except PlacementError as error:
                if error.path not in config_errors:
                    self._attach(error.path, error.message)
                valid = False
            else:
                for path, message in needs_a_gpu(config["pool"], self.plan).items():
                    if path not in config_errors:
                        self._attach(path, message)
                        valid = False
        if valid and self.has_errors():  # a form's own check found more (defensive)
            valid = False
        run_config = RunConfig.from_dict(config) if valid else None
        if run_config is not None:
            for path, message in prompt_fit_problems(run_config, zoo_root()).items():
                self._attach(path, message)
                valid = False
        if valid and run_config is not None:
            self.config = run_config.to_dict()
            self.sizes = self._size_report()
        else:
            self.config = None
            self.sizes = None
        return valid

    # --- sizes a person would question ----------------------------------------------------
    acknowledge_label = ACKNOWLEDGE_LABEL
    ACKNOWLEDGE_FIELD = "sizes_checked"

    def _size_report(self) -> SizeReport:
        assert self.config is not None and self.plan is not None
        resources = self.resources.cleaned_data
        backend, partition = str(resources.get("backend", "")), str(resources["partition"])
        return size_report(
            self.config,
            [count.value for count in self.parameters],
            self.plan,
            resources,
            self.resources.partitions.get(resources["partition"], {}),
            (
                self.step_rate(backend, partition, parameters=largest_model(self.parameters))
                if self.step_rate
                else None
            ),
        )

    @property
    def size_warnings(self) -> tuple[str, ...]:
        return self.sizes.warnings if self.sizes else ()

    def sizes_acknowledged(self) -> bool:
        """Whether Save may go ahead on the sizes (after :meth:`is_valid`): no warnings, or
        "I have checked these sizes" ticked on a page that showed these same warnings (the
        checkbox carries their digest: an edit that changes them needs a new tick)."""
        if not self.size_warnings:
            return True
        assert self.sizes is not None
        return self.acknowledgement() == self.sizes.digest

    def acknowledgement(self) -> str:
        """The digest the acknowledgement checkbox sent ("" when it was not ticked)."""
        if self.data is None:
            return ""
        return str(self.data.get(self.ACKNOWLEDGE_FIELD) or "")

    @property
    def sizes_ticked(self) -> bool:
        """Whether the checkbox shows ticked: sent with the digest of these warnings."""
        return bool(self.sizes) and self.acknowledgement() == self.sizes.digest  # type: ignore[union-attr]

    @property
    def sizes_refusal(self) -> str:
        """Why Save saved nothing, after the views refused it (else "")."""
        if not self.sizes_refused:
            return ""
        if self.acknowledgement():
            return (
                "Nothing was saved: the sizes changed since you ticked "
                f"\u201c{ACKNOWLEDGE_LABEL}\u201d. Check the warnings below, tick it again "
                "and press Save."
            )
        return (
            f"Nothing was saved: these sizes need a second look. Tick \u201c{ACKNOWLEDGE_LABEL}"
            "\u201d under the warnings below, then press Save."
        )

    def _checked_policies(self) -> list[PolicyForm]:
        """The kept policies in their order on screen, when the formset has problems
        (``visible_forms`` needs a valid one): a policy added and left blank counts only
        when something was typed in it, as Django's formset counts it."""
        return [
            form
            for form in self._kept_policies()
            if not (form.empty_permitted and not form.has_changed())
        ]

    def _zoo_problems(self) -> dict[str, str]:
        """``pool[i].model`` -> why: each zoo model the pool names that is not built in
        the zoo the runs read (the build command said), checked on Preview and Save since
        the run would fail on it a minute after launch."""
        problems: dict[str, str] = {}
        for index, form in enumerate(self.visible):
            if form.resolved is None:
                continue
            problem = zoo_build_problem(form.resolved.source)
            if problem:
                problems[f"pool[{index}].model"] = problem
        return problems

    def _can_plan(self) -> bool:
        """Whether MWRA has what it reads: every policy's model found, and the resources
        it plans within (partition, GPUs, nodes, CPUs, memory) free of problems."""
        if not self.visible or any(form.resolved is None for form in self.visible):
            return False
        needed = ("partition", "gpus", "nodes", "cpus_per_gpu", "cpus", "mem_gb")
        cleaned = getattr(self.resources, "cleaned_data", {})
        return (
            "partition" in cleaned
            and "gpus" in cleaned
            and not any(name in self.resources.errors for name in needed)
        )

    def _build_config(self) -> dict[str, Any]:
        """The trainer JSON of every field that passed its own checks (the others are
        left out: the config's default stands in while the rest is checked)."""
        config = self.form.config_values()
        config["pool"] = [form.to_policy() for form in self.visible]
        for section in self.sections:
            if section.relevant:
                config[section.name] = section.form.config_values()
        return config

    def _plan(self, pool: list[dict[str, Any]]) -> PlacementPlan:
        self.parameters = [form.resolved.parameters() for form in self.visible]  # type: ignore[union-attr]
        demands = [
            PolicyDemand(
                name=str(policy.get("name") or f"policy-{index + 1}"),
                parameter_count=count.value,
                device_share=policy.get("device_share"),
            )
            for index, (policy, count) in enumerate(zip(pool, self.parameters, strict=True))
        ]
        resources = self.resources.cleaned_data
        spec = self.resources.partitions[resources["partition"]]
        gpus_per_node = spec.get("gpus_per_node", 0)
        return plan_placement(
            demands,
            gpus=resources["gpus"],
            gpus_per_node=gpus_per_node if resources["gpus"] else None,
            nodes=resources.get("nodes"),
            max_nodes=spec.get("nodes"),
            cpus_per_gpu=resources.get("cpus_per_gpu"),
            cpus=resources.get("cpus"),
            mem_gb=resources.get("mem_gb"),
        )

    def _attach(self, path: str, message: str, *, imported: bool = False) -> None:
        """Put a ConfigError / PlacementError message next to the field ``path`` names;
        a message with no field of its own starts with the path as the page names it
        ("Policy 2 · Learning rate: ...", never ``pool[1].lr``)."""
        message = readable_message(message)
        titled = f"{path_title(path)}: {message}" if path else message
        match = re.match(r"^pool\[(\d+)\]\.(\w+)", path)
        if match:
            index, name = int(match[1]), match[2]
            if index < len(self.visible):
                form = self.visible[index]
                if name in form.fields:
                    self._add_error(form, name, message, imported)
                else:  # shown on the policy, which the summary names ("Policy 2")
                    form.add_error(None, message)
                return
        if path == "pool":
            if not self._pool_refused:  # else the formset said it (too few, too many)
                self.pool._non_form_errors.append(message)  # type: ignore[union-attr]
            return
        if path.startswith("pool"):
            self.pool._non_form_errors.append(titled)  # type: ignore[union-attr]
            return
        if path == "nodes":
            self._add_error(self.resources, "nodes", message, imported)
            return
        if path in {"gpus", "gpus_per_node"}:
            self._add_error(self.resources, "gpus", message, imported)
            return
        head, _, rest = path.partition(".")
        field = re.sub(r"\[\d+\]$", "", rest)
        for section in self.sections:
            if section.name == head and rest:
                if field in section.form.fields:
                    self._add_error(section.form, field, message, imported)
                else:  # shown on the section, which the summary names ("GRPO")
                    section.form.add_error(None, message)
                return
        if path == "seed":
            self._add_error(self.form, "seeds", message, imported)
        elif path in self.form.fields:
            self._add_error(self.form, path, message, imported)
        else:
            self.form.add_error(None, titled)

    def _add_error(
        self, form: forms.BaseForm, name: str, message: str, imported: bool = False
    ) -> None:
        """``message`` next to field ``name`` of ``form``, unless the field's own check
        already refused what was typed: the config then held its default instead, so a
        message about that value would be about a value nobody typed. (An ``imported``
        config's message is about the value it holds: shown too.)"""
        if (id(form), name) in self._field_errors and not imported:
            return
        form.add_error(name, message)

    # --- results -------------------------------------------------------------------------
    def save_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``services.experiment_create`` / ``experiment_update``."""
        assert self.config is not None and self.plan is not None
        resources = self.resources.to_resources()
        resources.update(
            nodes=self.plan.slurm.nodes,
            gpus_per_node=self.plan.slurm.gpus_per_node,
            placement=self.plan.to_dict(),
        )
        data = self.form.cleaned_data
        return {
            "config": self.config,
            "seeds": data["seeds"],
            "resources": resources,
            "description": data.get("description", ""),
            "notes": data.get("notes", ""),
            "tags": data.get("tags", []),
        }

    def config_json(self) -> str:
        return json.dumps(self.config, indent=2)

    def plan_rows(self) -> list[PlanRow]:
        assert self.plan is not None
        return [
            PlanRow(
                name=placement.name,
                parameters=count,
                node=placement.node,
                devices=placement.cuda_visible_devices,
                memory_fraction=placement.memory_fraction,
            )
            for placement, count in zip(self.plan.policies, self.parameters, strict=True)
        ]

    def _kept_policies(self) -> list[PolicyForm]:
        """The policies not removed, in their order on screen (their ORDER, then index),
        as experiment-form.js numbers them: "Policy 2" is the second of these."""
        kept = []
        for index, form in enumerate(self.pool.forms):
            if self.is_bound and form["DELETE"].value():
                continue
            order = str(form["ORDER"].value() or "").strip()
            number = ascii_digits(order, max_digits=9)
            key = math.inf if number is None else number  # ORDER "x" or 10,000 digits: last
            kept.append((key, index, form))
        return [form for _, _, form in sorted(kept, key=lambda item: item[:2])]

    def error_summary(self) -> list[ErrorLink]:
        """Every message on the page, in page order, each naming its field as the page does
        and linking to it (the summary at the top of the form)."""
        if not self.is_bound:
            return []
        main, switched = self.form, [s for s in self.sections if s.relevant and s.switch]
        links = [ErrorLink("form-errors", "", str(e)) for e in main.non_field_errors()]
        links += _field_links(main, "", [*main.GENERAL, *main.CHOICE])
        for section in switched:
            links += _section_links(section)
        links += [ErrorLink("pool", "Policy pool", str(e)) for e in self.pool.non_form_errors()]
        for form in self._kept_policies():
            title = f"Policy {form.number}"
            links += [ErrorLink(f"policy-{form.index}", title, e) for e in form.non_field_errors()]
            links += _field_links(form, title, list(form.fields))
        for section in self.sections:
            if section.relevant and not section.switch:
                links += _section_links(section)
        schedule = [name for name in main.fields if name not in {*main.GENERAL, *main.CHOICE}]
        links += _field_links(main, "", schedule)
        links += _field_links(self.resources, "Resources", list(self.resources.fields))
        return links

    def has_errors(self) -> bool:
        if not self.is_bound:
            return False
        forms_ = [self.form, self.resources, *(s.form for s in self.sections if s.relevant)]
        # pool.errors leaves out removed policies, whose fields are never checked.
        return (
            any(form.errors for form in forms_)
            or bool(self.pool.non_form_errors())
            or any(self.pool.errors)
        )


def needs_a_gpu(pool: list[dict[str, Any]], plan: PlacementPlan) -> dict[str, str]:
    """What the trainer JSON's ``pool`` asks of a GPU that ``plan`` does not give it, by
    field path: ``rollout_compile`` (compiling the decoding forward needs CUDA) and
    ``dtype`` float16 (autocast with a gradient scaler, accelerators only). A worker would
    refuse either when it starts (``trainer.policy.RolloutSetupError`` /
    ``PrecisionError``); bfloat16 runs on every CPU."""
    problems: dict[str, str] = {}
    for index, (policy, placement) in enumerate(zip(pool, plan.policies, strict=True)):
        if placement.devices:
            continue
        if policy.get("rollout_compile"):
            problems[f"pool[{index}].rollout_compile"] = (
                "rollout_compile compiles on CUDA only and this policy gets no GPU: "
                "request GPUs in the resources, or turn rollout_compile off"
            )
        if policy.get("dtype") == "float16":
            problems[f"pool[{index}].dtype"] = (
                "float16 needs a GPU and this policy gets none: on the CPU choose bfloat16 "
                "(autocast, no gradient scaler) or float32, or request GPUs in the resources"
            )
    return problems


# --- initial values -----------------------------------------------------------------------
def _default_initial() -> dict[str, Any]:
    return {
        "main": {},
        "resources": ResourcesForm.defaults(),
        "pool": [dict(policy) for policy in DEFAULT_POOL],
        "sections": {},
    }


def _initial_from(
    experiment: Experiment, resolver: ModelResolver, *, clone: bool
) -> dict[str, Any]:
    """Every field of the page from a stored experiment (its config, seeds, resources)."""
    config = experiment.config if isinstance(experiment.config, dict) else {}
    initial = _initial_from_config(config, resolver)
    main = initial["main"]
    main.update(
        name=copy_name(experiment.name) if clone else experiment.name,
        description=experiment.description,
        notes=experiment.notes,
        tags=", ".join(tag.name for tag in experiment.tags.all()),
        seeds=", ".join(str(seed) for seed in experiment.seeds),
    )
    if clone:
        main["cloned_from"] = experiment.pk
    stored = experiment.resources if isinstance(experiment.resources, dict) else {}
    for name in ResourcesForm.base_fields:
        if stored.get(name) is not None:
            initial["resources"][name] = stored[name]
    return initial


def _initial_from_config(config: dict[str, Any], resolver: ModelResolver) -> dict[str, Any]:
    """Every field of the page from a trainer config (resources at their defaults; the
    config's seed, if any, as the one seed)."""
    main = ExperimentForm.initial_from_config(config)
    seed = config.get("seed")
    main["seeds"] = str(seed) if type(seed) is int else "0"
    pool = []
    raw_pool = config.get("pool", [])
    for policy in raw_pool if isinstance(raw_pool, list) else []:
        if not isinstance(policy, dict):
            pool.append({})  # an empty policy keeps the indexes of the config's messages
            continue
        values = PolicyForm.initial_from_config(policy)
        values["model"], from_registry = resolver.display_name(policy)
        if from_registry:
            values["tokenizer"] = values["chat_template"] = ""
        pool.append(values)
    sections = {
        name: section_form(name).initial_from_config(config.get(name)) for name in section_names()
    }
    return {
        "main": main,
        "resources": ResourcesForm.defaults(),
        "pool": pool,
        "sections": sections,
    }


def _field_links(form: forms.BaseForm, title: str, names: list[str]) -> list[ErrorLink]:
    """Error-summary lines of the fields ``names`` of ``form`` (``title``: "Policy 2")."""
    links = []
    for name in names:
        if name not in form.errors or name not in form.fields:
            continue
        field = form[name]
        label = f"{title} · {field.label}" if title else str(field.label)
        links += [ErrorLink(field.id_for_label, label, str(e)) for e in field.errors]
    return links


def _section_links(section: Section) -> list[ErrorLink]:
    target = f"section-{section.name}"
    links = [ErrorLink(target, section.title, str(e)) for e in section.form.non_field_errors()]
    return links + _field_links(section.form, section.title, list(section.form.fields))


def _messages(form: forms.BaseForm) -> list[str]:
    return [str(message) for errors in form.errors.values() for message in errors]


def _raw_values(form_class: type[ConfigForm], data: Any, prefix: str) -> dict[str, Any]:
    """What the browser sent for a form's fields, as initial values (no validation)."""
    form = form_class(prefix=prefix)
    return {
        name: field.widget.value_from_datadict(data, MultiValueDict(), form.add_prefix(name))
        for name, field in form.fields.items()
    }
