"""The compose and registry pages' forms, one module per concern; they check input and
put each message next to its field. The composer that validates them together into one
trainer config is :mod:`webapp.experiments.compose`.

- :mod:`.experiment`: name, description, tags, notes, regime (the registered ones), seeds
  and the schedule (RunConfig's scalar fields);
- :mod:`.resources`: backend, partition, GPUs, CPUs, memory, time limit, Slurm names;
- :mod:`.policy`: one policy of the pool and the pool's formset;
- :mod:`.sections`: the config sections' forms (generated, the task's with its data paths);
- :mod:`.config_import`: the "Import config JSON" box and what an imported config lacks;
- :mod:`.model_entry`: a model registry entry;
- :mod:`.suite`: an evaluation suite (its tasks, their files checked);
- :mod:`.common`: the name and tokenizer checks these share.
"""

from __future__ import annotations

from trainer.config import MAX_MICRO_BATCH
from webapp.experiments.forms.common import NAME_HELP, check_name, checked_tokenizer
from webapp.experiments.forms.config_import import (
    MAX_IMPORT_BYTES,
    MAX_IMPORT_DEPTH,
    ConfigImportForm,
    config_problems,
)
from webapp.experiments.forms.experiment import (
    MAX_SEED,
    MAX_SEEDS,
    MAX_TAGS,
    ExperimentForm,
    parse_seeds,
    parse_tags,
)
from webapp.experiments.forms.model_entry import ModelEntryForm
from webapp.experiments.forms.policy import BasePolicyFormSet, PolicyForm, PolicyFormSet
from webapp.experiments.forms.resources import RESOURCE_FIELDS, ResourcesForm
from webapp.experiments.forms.sections import SECTION_FORMS, TaskSectionForm, section_form
from webapp.experiments.forms.suite import SuiteForm

__all__ = [
    "MAX_IMPORT_BYTES",
    "MAX_IMPORT_DEPTH",
    "MAX_MICRO_BATCH",
    "MAX_SEED",
    "MAX_SEEDS",
    "MAX_TAGS",
    "NAME_HELP",
    "RESOURCE_FIELDS",
    "SECTION_FORMS",
    "BasePolicyFormSet",
    "ConfigImportForm",
    "ExperimentForm",
    "ModelEntryForm",
    "PolicyForm",
    "PolicyFormSet",
    "ResourcesForm",
    "SuiteForm",
    "TaskSectionForm",
    "check_name",
    "checked_tokenizer",
    "config_problems",
    "parse_seeds",
    "parse_tags",
    "section_form",
]
