"""The registry's forms: a model entry, an evaluation suite (its tasks, their files
checked), and the name and tokenizer checks they share with the compose page's forms."""

from __future__ import annotations

from webapp.registry.forms.common import NAME_HELP, check_name, checked_tokenizer
from webapp.registry.forms.model_entry import ModelEntryForm
from webapp.registry.forms.suite import SuiteForm

__all__ = ["NAME_HELP", "ModelEntryForm", "SuiteForm", "check_name", "checked_tokenizer"]
