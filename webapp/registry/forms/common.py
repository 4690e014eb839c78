"""Checks more than one form of the compose and registry pages share."""

from __future__ import annotations

from django.core.exceptions import ValidationError

from trainer.config import NAME_PATTERN
from webapp.registry.sources import tokenizer_problem

NAME_HELP = "1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"


def check_name(value: str, what: str = "name") -> None:
    """A name as the trainer config accepts it (experiments, policies, registry entries)."""
    if not NAME_PATTERN.match(value):
        raise ValidationError(
            f"{value!r} is not a valid {what}: use {NAME_HELP}", code="invalid_name"
        )


def checked_tokenizer(value: str) -> str:
    """A tokenizer directory field: blank, or a directory a tokenizer loads from."""
    value = value.strip()
    problem = tokenizer_problem(value) if value else None
    if problem:
        raise ValidationError(problem, code="bad_tokenizer")
    return value
