"""The experiment form (pool formset, regime sections, resources) and the model registry form.

:class:`ExperimentComposer` bundles the pieces of one experiment page: the general form
(name, regime, schedule, seeds...), one section form per config section (built from the
trainer dataclasses by :mod:`webapp.experiments.configform`), the resources form and the
policy pool formset. It validates them field by field, then builds the trainer JSON,
validates it with ``RunConfig.from_dict`` and puts every ``ConfigError`` message next to
the field it names, then plans the placement with MWRA (SPEC 4.6).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator
from django.forms import formset_factory
from django.http import QueryDict
from django.utils.datastructures import MultiValueDict

from trainer.config import (
    MAX_POOL,
    NAME_PATTERN,
    OFF_POLICY,
    REGIMES,
    ConfigError,
    PolicyConfig,
    RunConfig,
)
from trainer.mwra import (
    ParameterCount,
    PlacementError,
    PlacementPlan,
    PolicyDemand,
    plan_placement,
)
from webapp.experiments.compose_services import ENTRY_FIELDS
from webapp.experiments.compose_sources import (
    ModelResolver,
    ResolvedModel,
    source_problem,
    tokenizer_problem,
)
from webapp.experiments.configform import (
    MAX_CONFIG_INT,
    ConfigForm,
    path_title,
    readable_message,
    section_form_class,
    section_names,
    section_switch,
    section_title,
    tag_fields,
)
from webapp.experiments.models import Experiment, Lab, ModelEntry
from webapp.experiments.services import copy_name
from webapp.experiments.task_data import task_data_problems

MAX_SEEDS = 32
MAX_SEED = 2**31 - 1
MAX_TAGS = 16
MAX_MICRO_BATCH = 65_536
BACKENDS = ("local", "slurm")
RESOURCE_FIELDS = (
    *("backend", "partition", "gpus", "cpus_per_gpu", "cpus", "mem_gb"),
    *("time_limit", "account", "qos"),
)
"""The resources section's fields, in the form's order (the stored ``resources``)."""
TIME_LIMIT = re.compile(
    r"^(?:(?P<days>\d{1,3})-)?(?P<hours>\d{1,3}):(?P<minutes>[0-5]\d):(?P<seconds>[0-5]\d)$"
)
SLURM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
FAMILY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
NAME_HELP = "1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
DEFAULT_POOL = (
    {"name": "llama-char", "model": "zoo:tiny-llama-char"},
    {"name": "qwen-bpe", "model": "zoo:tiny-qwen-bpe"},
)
"""A new experiment starts with two tiny-zoo policies of different tokenizers."""


def _check_name(value: str, what: str = "name") -> None:
    if not NAME_PATTERN.match(value):
        raise ValidationError(
            f"{value!r} is not a valid {what}: use {NAME_HELP}", code="invalid_name"
        )


def parse_seeds(text: str) -> list[int]:
    """``"0, 1, 2"`` -> ``[0, 1, 2]``: 1..32 distinct non-negative integers."""
    parts = [part for part in re.split(r"[\s,]+", text.strip()) if part]
    if not parts:
        raise ValidationError("give at least one seed, e.g. 0 or 0, 1, 2", code="required")
    seeds: list[int] = []
    for part in parts:
        if not part.isdigit() or not part.isascii():
            raise ValidationError(
                f"seeds are non-negative whole numbers separated by commas (e.g. 0, 1, 2); "
                f"{part!r} is not one",
                code="bad_seed",
            )
        seed = int(part)
        if seed > MAX_SEED:
            raise ValidationError(f"seed {seed} is too large (at most {MAX_SEED})", code="big")
        if seed in seeds:
            raise ValidationError(
                f"duplicate seed {seed}: each seed is one run, give each once", code="duplicate"
            )
        seeds.append(seed)
    if len(seeds) > MAX_SEEDS:
        raise ValidationError(
            f"give 1 to {MAX_SEEDS} seeds (one run each); got {len(seeds)}", code="too_many"
        )
    return seeds


def parse_tags(text: str) -> list[str]:
    """``"baseline, sgt"`` -> ``["baseline", "sgt"]`` (names, deduplicated)."""
    tags: list[str] = []
    for part in (part.strip() for part in text.split(",")):
        if not part:
            continue
        if len(part) > 48 or not NAME_PATTERN.match(part):
            raise ValidationError(
                f"{part!r} is not a valid tag: use 1-48 letters, digits, '_', '.' or '-'",
                code="invalid_tag",
            )
        if part not in tags:
            tags.append(part)
    if len(tags) > MAX_TAGS:
        raise ValidationError(f"at most {MAX_TAGS} tags; got {len(tags)}", code="too_many")
    return tags


# --- the general part ---------------------------------------------------------------------
class ExperimentForm(ConfigForm):
    """Name, description, tags, notes, regime, seeds, and RunConfig's other scalar fields."""

    config_class = RunConfig
    config_exclude = ("seed",)
    field_order = ("name", "description", "tags", "notes", "regime", "off_policy", "seeds")
    GENERAL = ("name", "description", "tags", "notes")
    CHOICE = ("regime", "off_policy")

    name = forms.CharField(
        max_length=64,
        validators=[_check_name],
        help_text=f"Experiment and run name: {NAME_HELP}",
    )
    description = forms.CharField(
        required=False, max_length=5000, widget=forms.Textarea(attrs={"rows": 2})
    )
    tags = forms.CharField(
        required=False, max_length=1000, help_text="Comma-separated, e.g. baseline, sgt-sweep"
    )
    notes = forms.CharField(
        required=False, max_length=20000, widget=forms.Textarea(attrs={"rows": 3})
    )
    regime = forms.ChoiceField(
        choices=[(regime, regime) for regime in REGIMES],
        initial=REGIMES[0],
        help_text="How experience crosses between policies (SPEC 4)",
    )
    off_policy = forms.ChoiceField(
        choices=[(method, method) for method in OFF_POLICY],
        initial=OFF_POLICY[0],
        help_text="Off-policy reuse applied per policy on top of the regime (SPEC 5)",
    )
    seeds = forms.CharField(
        max_length=1000,
        initial="0",
        help_text=f"One run per seed: 1 to {MAX_SEEDS} distinct integers >= 0, e.g. 0, 1, 2",
    )
    cloned_from = forms.IntegerField(required=False, widget=forms.HiddenInput)

    def clean_seeds(self) -> list[int]:
        return parse_seeds(self.cleaned_data["seeds"])

    def clean_tags(self) -> list[str]:
        return parse_tags(self.cleaned_data.get("tags", ""))

    def general_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.GENERAL]

    def schedule_fields(self) -> list[forms.BoundField]:
        """RunConfig's scalar fields besides name and regime: steps, prompts_per_step..."""
        skip = {*self.GENERAL, *self.CHOICE}
        return [self[name] for name in self.config_specs if name not in skip]


# --- resources ----------------------------------------------------------------------------
class ResourcesForm(forms.Form):
    """Where the runs go and what they ask for; checked against ``settings.PARTITIONS``."""

    use_required_attribute = False

    backend = forms.ChoiceField(
        choices=[(backend, backend) for backend in BACKENDS],
        help_text="local: this machine; slurm: a job on the cluster",
    )
    partition = forms.ChoiceField(choices=(), help_text="Where the job runs")
    gpus = forms.IntegerField(
        min_value=0,
        max_value=4096,
        initial=0,
        help_text="GPUs for the whole job (0: every worker on CPU); MWRA splits them",
    )
    cpus_per_gpu = forms.IntegerField(
        required=False, min_value=1, max_value=1024, help_text="CPU cores per GPU"
    )
    cpus = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=100_000,
        help_text="CPU cores for the whole job (instead of cpus_per_gpu)",
    )
    mem_gb = forms.IntegerField(
        required=False, min_value=1, max_value=100_000, help_text="Memory per node, GB"
    )
    time_limit = forms.CharField(
        max_length=64, help_text="Wall-clock limit, HH:MM:SS or D-HH:MM:SS"
    )
    account = forms.CharField(required=False, max_length=64, help_text="Slurm account")
    qos = forms.CharField(required=False, max_length=64, help_text="Slurm QOS")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.partitions: dict[str, dict[str, int]] = dict(settings.PARTITIONS)
        self.fields["partition"].choices = [
            (name, _partition_label(name, spec)) for name, spec in self.partitions.items()
        ]
        tag_fields(self)

    @staticmethod
    def defaults() -> dict[str, Any]:
        backend, partition = "local", "local"
        if settings.EXECUTOR == "slurm":
            cluster = [name for name in settings.PARTITIONS if name != "local"]
            if settings.SLURM_PARTITION in cluster:
                backend, partition = "slurm", settings.SLURM_PARTITION
            elif cluster:
                backend, partition = "slurm", cluster[0]
        return {
            "backend": backend,
            "partition": partition,
            "gpus": 0,
            "time_limit": settings.SLURM_TIME_LIMIT,
            "account": settings.SLURM_ACCOUNT,
            "qos": settings.SLURM_QOS,
        }

    def clean_time_limit(self) -> str:
        value = self.cleaned_data["time_limit"].strip()
        match = TIME_LIMIT.match(value)
        if not match:
            raise ValidationError(
                f"{value!r} is not a time limit: use HH:MM:SS or D-HH:MM:SS, e.g. 12:00:00 "
                "or 2-00:00:00",
                code="bad_time_limit",
            )
        if match["days"] is not None and int(match["hours"]) > 23:
            raise ValidationError(
                f"{value!r} is not a time limit: with days, hours must be 00-23 (e.g. 1-12:00:00)",
                code="bad_time_limit",
            )
        if not any(int(match[part] or 0) for part in ("days", "hours", "minutes", "seconds")):
            raise ValidationError("the time limit must be longer than zero", code="zero")
        return value

    def clean_account(self) -> str:
        return self._slurm_name("account")

    def clean_qos(self) -> str:
        return self._slurm_name("qos")

    def _slurm_name(self, name: str) -> str:
        value = self.cleaned_data[name].strip()
        if value and not SLURM_NAME.match(value):
            raise ValidationError(
                f"{value!r} is not a valid Slurm {name}: use letters, digits, '_', '.' or '-' "
                "(no spaces or shell characters)",
                code="invalid",
            )
        return value

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        partition = data.get("partition")
        backend = data.get("backend")
        if partition and backend:
            if backend == "local" and partition != "local":
                self.add_error(
                    "partition",
                    "the local backend runs on this machine: choose partition 'local', or "
                    "backend 'slurm' for a cluster partition",
                )
            elif backend == "slurm" and partition == "local":
                self.add_error(
                    "partition",
                    "'local' is this machine, not a Slurm partition: choose a cluster "
                    "partition (settings MRL_PARTITIONS), or backend 'local'",
                )
        if partition in self.partitions:
            self._check_capacity(partition, self.partitions[partition], data)
        if data.get("cpus_per_gpu") and data.get("cpus"):
            self.add_error("cpus", "give cpus_per_gpu or cpus, not both")
        if data.get("cpus_per_gpu") and data.get("gpus") == 0:
            self.add_error("cpus_per_gpu", "a job without GPUs takes cpus, not cpus_per_gpu")
        return data

    def _check_capacity(self, partition: str, spec: dict[str, int], data: dict[str, Any]) -> None:
        nodes, per_node = spec.get("nodes", 1), spec.get("gpus_per_node", 0)
        gpus = data.get("gpus")
        if gpus is not None and gpus > nodes * per_node:
            self.add_error(
                "gpus",
                f"more GPUs than the partition has: {partition!r} has {nodes * per_node} "
                f"GPUs ({nodes} node(s) x {per_node}); request at most {nodes * per_node} or "
                "choose another partition",
            )
            return
        job_nodes = math.ceil(gpus / per_node) if gpus and per_node else 1
        gpus_on_node = min(gpus or 0, per_node)
        cpus_per_node = spec.get("cpus_per_node")
        if cpus_per_node and data.get("cpus_per_gpu"):
            wanted = data["cpus_per_gpu"] * gpus_on_node
            if wanted > cpus_per_node:
                self.add_error(
                    "cpus_per_gpu",
                    f"more CPUs than a node has: {data['cpus_per_gpu']} x {gpus_on_node} GPUs "
                    f"= {wanted} > {cpus_per_node} cores per node of {partition!r}",
                )
        if cpus_per_node and data.get("cpus") and data["cpus"] > cpus_per_node * job_nodes:
            self.add_error(
                "cpus",
                f"more CPUs than the partition gives this job: {job_nodes} node(s) x "
                f"{cpus_per_node} cores = {cpus_per_node * job_nodes}",
            )
        mem_per_node = spec.get("mem_gb_per_node")
        if mem_per_node and data.get("mem_gb") and data["mem_gb"] > mem_per_node:
            self.add_error(
                "mem_gb",
                f"more memory than a node has: {partition!r} nodes have {mem_per_node} GB",
            )

    def to_resources(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {name: data.get(name) for name in RESOURCE_FIELDS}


def _partition_label(name: str, spec: dict[str, int]) -> str:
    gpus = spec.get("gpus_per_node", 0)
    return f"{name} ({spec.get('nodes', 1)} node(s) x {gpus} GPU(s))"


# --- the pool -----------------------------------------------------------------------------
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
        # The trainer's divisibility hint for micro_batch_size counts up to it: keep it sane.
        self.fields["micro_batch_size"].validators.append(MaxValueValidator(MAX_MICRO_BATCH))
        self.fields["model"].widget.attrs["list"] = "model-suggestions"
        self.fields["name"].widget.attrs["autocomplete"] = "off"

    def clean_model(self) -> str:
        text = self.cleaned_data["model"].strip()
        self.resolved = self.resolver.resolve(text)
        return text

    def clean_tokenizer(self) -> str:
        return _checked_tokenizer(self.cleaned_data.get("tokenizer", ""))

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
        """The policy's trainer JSON (a registry entry supplies tokenizer/chat template)."""
        policy = self.config_values()
        assert self.resolved is not None
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


# --- sections -----------------------------------------------------------------------------
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


def _section_form(name: str) -> type[ConfigForm]:
    return SECTION_FORMS.get(name) or section_form_class(name)


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


# --- the whole page -----------------------------------------------------------------------
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
    ) -> None:
        self.resolver = ModelResolver(lab)
        self.is_bound = data is not None
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
            form_class = _section_form(name)
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
        self.parameters: list[ParameterCount] = []
        self.visible: list[PolicyForm] = []

    @staticmethod
    def _choice(data: Any, name: str, initial: dict[str, Any]) -> str:
        options = REGIMES if name == "regime" else OFF_POLICY
        value = data.get(name) if data is not None else initial.get(name)
        return value if value in options else options[0]

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
                self._attach(path, message)

    def _all_forms(self) -> list[forms.BaseForm]:
        return [
            self.form,
            self.resources,
            *(s.form for s in self.sections if s.relevant),
            *self.pool.forms,
        ]

    # --- validation ---------------------------------------------------------------------
    def is_valid(self) -> bool:
        if not self.is_bound:
            return False
        valid = self.form.is_valid()
        valid = self.resources.is_valid() and valid
        valid = self.pool.is_valid() and valid
        for section in self.sections:
            if section.relevant:
                valid = section.form.is_valid() and valid
        if not valid:
            return False
        # Fixed now: attaching config errors below makes the formset invalid.
        self.visible = self.pool.visible_forms()
        config = self._build_config()
        config_errors: dict[str, str] = {}
        try:
            RunConfig.from_dict(config)
        except ConfigError as error:
            config_errors = error.errors
            for path, message in config_errors.items():
                self._attach(path, message)
            valid = False
        try:
            self.plan = self._plan(config["pool"])
        except PlacementError as error:
            if error.path not in config_errors:
                self._attach(error.path, error.message)
            valid = False
        if valid:
            self.config = RunConfig.from_dict(config).to_dict()
        return valid

    def _build_config(self) -> dict[str, Any]:
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
                name=policy["name"],
                parameter_count=count.value,
                device_share=policy.get("device_share"),
            )
            for policy, count in zip(pool, self.parameters, strict=True)
        ]
        resources = self.resources.cleaned_data
        spec = self.resources.partitions[resources["partition"]]
        gpus_per_node = spec.get("gpus_per_node", 0)
        return plan_placement(
            demands,
            gpus=resources["gpus"],
            gpus_per_node=gpus_per_node if resources["gpus"] else None,
            max_nodes=spec.get("nodes"),
            cpus_per_gpu=resources.get("cpus_per_gpu"),
            cpus=resources.get("cpus"),
            mem_gb=resources.get("mem_gb"),
        )

    def _attach(self, path: str, message: str) -> None:
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
                    form.add_error(name, message)
                else:
                    form.add_error(None, titled)
                return
        if path == "pool":
            self.pool._non_form_errors.append(message)  # type: ignore[union-attr]
            return
        if path.startswith("pool"):
            self.pool._non_form_errors.append(titled)  # type: ignore[union-attr]
            return
        if path in {"gpus", "gpus_per_node", "nodes"}:
            self.resources.add_error("gpus", message)
            return
        head, _, rest = path.partition(".")
        field = re.sub(r"\[\d+\]$", "", rest)
        for section in self.sections:
            if section.name == head and rest:
                if field in section.form.fields:
                    section.form.add_error(field, message)
                else:
                    section.form.add_error(None, titled)
                return
        if path == "seed":
            self.form.add_error("seeds", message)
        elif path in self.form.fields:
            self.form.add_error(path, message)
        else:
            self.form.add_error(None, titled)

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
            sane = order.isascii() and order.isdigit() and len(order) <= 9
            key = int(order) if sane else math.inf  # ORDER "x" or 10,000 digits: last
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
        name: section_form_class(name).initial_from_config(config.get(name))
        for name in section_names()
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


def _checked_tokenizer(value: str) -> str:
    """A tokenizer directory field: blank, or a directory a tokenizer loads from."""
    value = value.strip()
    problem = tokenizer_problem(value) if value else None
    if problem:
        raise ValidationError(problem, code="bad_tokenizer")
    return value


def _raw_values(form_class: type[ConfigForm], data: Any, prefix: str) -> dict[str, Any]:
    """What the browser sent for a form's fields, as initial values (no validation)."""
    form = form_class(prefix=prefix)
    return {
        name: field.widget.value_from_datadict(data, MultiValueDict(), form.add_prefix(name))
        for name, field in form.fields.items()
    }


# --- importing a trainer config -------------------------------------------------------------
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
    """What is wrong with an imported trainer config, by config path (``pool[1].lr``): what
    ``RunConfig.from_dict`` reports, after a cheap screen for what the form refuses before
    the trainer ever looks (integers beyond 32 bits, a micro_batch_size above
    ``MAX_MICRO_BATCH``, more than ``MAX_POOL`` policies), and what is wrong with the
    task's data paths (:func:`task_data_problems`)."""
    problems = _oversized(config, "")
    pool = config.get("pool")
    if isinstance(pool, list):
        if len(pool) > MAX_POOL:
            problems["pool"] = f"a pool has 1 to {MAX_POOL} policies; this one has {len(pool)}"
        for index, policy in enumerate(pool):
            size = policy.get("micro_batch_size") if isinstance(policy, dict) else None
            if type(size) is int and size > MAX_MICRO_BATCH:
                problems[f"pool[{index}].micro_batch_size"] = (
                    f"micro_batch_size must be at most {MAX_MICRO_BATCH}; got {size}"
                )
    if problems:
        return problems
    problems = task_data_problems(config.get("task"))
    try:
        RunConfig.from_dict(config)
    except ConfigError as error:
        return {**problems, **error.errors}
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


# --- the model registry -------------------------------------------------------------------
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
        _check_name(name)
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
        return _checked_tokenizer(self.cleaned_data.get("tokenizer", ""))

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
