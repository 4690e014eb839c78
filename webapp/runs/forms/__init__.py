"""The compose page's forms, one module per concern; they check input and
put each message next to its field. The composer that validates them together into one
trainer config is :mod:`webapp.runs.compose`.

- :mod:`.experiment`: name, description, tags, notes, regime (the registered ones), seeds
  and the schedule (RunConfig's scalar fields);
- :mod:`.resources`: backend, partition, GPUs, CPUs, memory, time limit, Slurm names;
- :mod:`.policy`: one policy of the pool and the pool's formset;
- :mod:`.sections`: the config sections' forms (generated, the task's with its data paths);
- :mod:`.config_import`: the "Import config JSON" box and what an imported config lacks;

The registry's forms (a model entry, a suite, and the name and tokenizer checks these
share) are in :mod:`webapp.registry.forms`.
"""

from __future__ import annotations

from trainer.config import MAX_MICRO_BATCH
from webapp.runs.forms.config_import import (
    MAX_IMPORT_BYTES,
    MAX_IMPORT_DEPTH,
    ConfigImportForm,
    config_problems,
)
from webapp.runs.forms.experiment import (
    MAX_SEED,
    MAX_SEEDS,
    MAX_TAGS,
    ExperimentForm,
    parse_seeds,
    parse_tags,
)
from webapp.runs.forms.policy import BasePolicyFormSet, PolicyForm, PolicyFormSet
from webapp.runs.forms.resources import RESOURCE_FIELDS, ResourcesForm
from webapp.runs.forms.sections import SECTION_FORMS, TaskSectionForm, section_form

__all__ = [
    "MAX_IMPORT_BYTES",
    "MAX_IMPORT_DEPTH",
    "MAX_MICRO_BATCH",
    "MAX_SEED",
    "MAX_SEEDS",
    "MAX_TAGS",
    "RESOURCE_FIELDS",
    "SECTION_FORMS",
    "BasePolicyFormSet",
    "ConfigImportForm",
    "ExperimentForm",
    "PolicyForm",
    "PolicyFormSet",
    "ResourcesForm",
    "TaskSectionForm",
    "config_problems",
    "parse_seeds",
    "parse_tags",
    "section_form",
]
