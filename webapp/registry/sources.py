"""Where a policy's model comes from: the lab's registry, the tiny zoo, or a local directory.

A pool's model field accepts three spellings: a registry entry's name (its source,
tokenizer and chat template are used), ``zoo:<id>`` for a tiny-zoo model, or an absolute
path to a local Hugging Face model directory. Checks read the filesystem only (never
weights, never ``transformers``) so they are cheap enough for every form submission.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from trainer.models import TOKENIZER_FILES
from trainer.mwra_counting import ParameterCount, parameter_count
from trainer.zoo import ALL_ZOO_IDS, RECIPE_EXTRAS, ZOO_PREFIX, build_command, recipe_of
from webapp.core.models import Lab
from webapp.registry import zoo_builds
from webapp.registry.models import ModelEntry
from webapp.registry.zoo_builds import zoo_root

MAX_LISTED = 12


def source_problem(source: str) -> str | None:
    """Why ``source`` is not a usable model source (``zoo:<id>`` or a directory), or None."""
    if source.startswith(ZOO_PREFIX):
        zoo_id = source[len(ZOO_PREFIX) :]
        if zoo_id not in ALL_ZOO_IDS:
            return f"unknown zoo model {zoo_id!r}; the zoo has {', '.join(ALL_ZOO_IDS)}"
        return None
    problem = directory_problem(source)
    if problem:
        return problem
    if not _is_file(Path(source) / "config.json"):
        return (
            f"{source} has no config.json, so it is not a Hugging Face model directory; "
            "give the directory that save_pretrained() wrote"
        )
    return None


def zoo_build_problem(source: str) -> str | None:
    """Why the zoo model ``source`` names cannot run yet (it is not built in
    :func:`zoo_root`, with the command that builds it; or its recipe is being built, with
    how far, :mod:`webapp.registry.zoo_builds`), or None (built, or no zoo model; an
    unknown zoo id is :func:`source_problem`'s)."""
    if not source.startswith(ZOO_PREFIX):
        return None
    zoo_id = source[len(ZOO_PREFIX) :]
    if zoo_id not in ALL_ZOO_IDS:
        return None
    root = zoo_root()
    if _is_file(root / zoo_id / "zoo.json"):
        return None
    recipe = recipe_of(zoo_id) or "default"
    building = zoo_builds.active_status(recipe, root)
    if building is not None:
        return (
            f"zoo model {zoo_id!r} is being built: {building.progress} (the {recipe} zoo, "
            f"into {root}, started {building.started}); a run cannot use it until it is "
            "built: Preview again then"
        )
    last = zoo_builds.load(recipe, root)
    failed = ""
    if last is not None and last.state == "failed":
        failed = f" (the last build of the {recipe} zoo failed: {last.error})"
    return (
        f"zoo model {zoo_id!r} is not built in {root}, so a run would fail when it starts: "
        f"build it with `{build_command(zoo_id, root)}` (from the project directory), then "
        f"Preview again; or choose a built model{failed}"
    )


def offered_zoo_ids() -> list[str]:
    """The zoo ids the compose form offers: every one, but those of a recipe that needs an
    optional extra (:data:`trainer.zoo.RECIPE_EXTRAS`) only when built in :func:`zoo_root`
    (typed while unbuilt, :func:`zoo_build_problem` says how to build it)."""
    root = zoo_root()
    return [
        zoo_id
        for zoo_id in ALL_ZOO_IDS
        if recipe_of(zoo_id) not in RECIPE_EXTRAS or _is_file(root / zoo_id / "zoo.json")
    ]


@dataclass(frozen=True)
class ExtraZooModel:
    """A zoo model whose recipe needs an optional extra (the converted SmolLM2), as the
    model registry page shows it: built in the app's zoo or not, and how to build it."""

    zoo_id: str
    built: bool
    command: str
    """The commands that install its extra and build it into :func:`zoo_root`."""

    @property
    def source(self) -> str:
        return ZOO_PREFIX + self.zoo_id


def extra_zoo_models() -> list[ExtraZooModel]:
    """Every zoo model of a recipe with an optional extra, built or not (the web app
    never builds them: a person runs :attr:`ExtraZooModel.command`)."""
    root = zoo_root()
    return [
        ExtraZooModel(zoo_id, _is_file(root / zoo_id / "zoo.json"), build_command(zoo_id, root))
        for zoo_id in ALL_ZOO_IDS
        if recipe_of(zoo_id) in RECIPE_EXTRAS
    ]


def tokenizer_problem(path: str) -> str | None:
    """Why ``path`` is not a tokenizer directory, or None."""
    problem = directory_problem(path)
    if problem:
        return problem
    if not any(_is_file(Path(path) / name) for name in TOKENIZER_FILES):
        return f"{path} has no {' or '.join(TOKENIZER_FILES)}; save the tokenizer there first"
    return None


def directory_problem(path: str) -> str | None:
    if any(ord(char) < 32 for char in path):
        return "a path cannot contain control characters or line breaks"
    if not path.startswith("/"):
        return (
            f"{path!r} is not an absolute path; give the full path of a directory "
            "(e.g. /data/models/qwen2-0.5b), or 'zoo:<id>' for a tiny-zoo model"
        )
    roots = [os.path.realpath(root) for root in getattr(settings, "MODEL_DIRS", [])]
    if roots:
        real = os.path.realpath(path)
        if not any(real == root or real.startswith(root.rstrip("/") + "/") for root in roots):
            return outside_model_dirs(path, roots)
    try:
        is_dir = Path(path).is_dir()
    except OSError as error:  # a name too long, a directory we may not enter...
        if roots:
            return outside_model_dirs(path, roots)
        return f"cannot read {path}: {error.strerror or error}"
    if not is_dir and roots:
        return outside_model_dirs(path, roots)
    if not is_dir:
        return f"no such directory {path} (models are never downloaded; give a local directory)"
    return None


def outside_model_dirs(path: str, roots: list[str]) -> str:
    """The one message for a directory outside ``MRL_MODEL_DIRS``, missing or unreadable:
    which of these is not said."""
    return (
        f"{path}: not a directory this deployment can read (missing, unreadable, or in a "
        f"place the app does not read from); give a directory inside {', '.join(roots)} "
        "(MRL_MODEL_DIRS)"
    )


def _is_file(path: Path) -> bool:
    """``path.is_file()``, False where the filesystem refuses to say (EACCES...)."""
    try:
        return path.is_file()
    except OSError:
        return False


@dataclass(frozen=True)
class ResolvedModel:
    """A pool entry's model after lookup: what the trainer config will say."""

    source: str
    entry: ModelEntry | None = None

    @property
    def tokenizer(self) -> str | None:
        return (self.entry.tokenizer or None) if self.entry else None

    @property
    def chat_template(self) -> str | None:
        return (self.entry.chat_template or None) if self.entry else None

    def parameters(self) -> ParameterCount:
        declared = self.entry.parameter_count if self.entry else None
        return parameter_count(self.source, declared=declared, zoo_dir=zoo_root())


class ModelResolver:
    """Resolves what users type in a policy's model field, against one lab's registry."""

    def __init__(self, lab: Lab | None) -> None:
        self.lab = lab
        self._entries: dict[str, ModelEntry] | None = None

    @property
    def entries(self) -> dict[str, ModelEntry]:
        if self._entries is None:
            queryset = (
                ModelEntry.objects.filter(lab=self.lab) if self.lab else ModelEntry.objects.none()
            )
            self._entries = {entry.name: entry for entry in queryset}
        return self._entries

    def suggestions(self) -> list[str]:
        """What the model field's datalist offers: registry names, then the zoo (a model
        whose recipe needs an optional extra, the converted SmolLM2, only once built)."""
        return [*self.entries, *(ZOO_PREFIX + zoo_id for zoo_id in offered_zoo_ids())]

    def resolve(self, text: str) -> ResolvedModel:
        """The model ``text`` names; ValidationError ("unknown model ...") otherwise."""
        text = text.strip()
        if text in self.entries:
            return ResolvedModel(self.entries[text].source, self.entries[text])
        if text.startswith(ZOO_PREFIX) or text.startswith("/"):
            problem = source_problem(text)
            if problem:
                raise ValidationError(f"unknown model {text!r}: {problem}", code="unknown_model")
            return ResolvedModel(text)
        raise ValidationError(
            f"unknown model {text!r}: use a name from the lab's model registry "
            f"({self._registry_text()}), 'zoo:<id>' ({', '.join(ALL_ZOO_IDS)}), or an absolute "
            "path to a local Hugging Face model directory",
            code="unknown_model",
        )

    def display_name(self, policy: dict[str, Any]) -> tuple[str, bool]:
        """What the model field shows for a stored policy, and whether a registry entry
        supplies its tokenizer and chat template (so those fields stay blank)."""
        model = str(policy.get("model", ""))
        for entry in self.entries.values():
            if (
                entry.source == model
                and (entry.tokenizer or None) == policy.get("tokenizer")
                and (entry.chat_template or None) == policy.get("chat_template")
            ):
                return entry.name, True
        return model, False

    def _registry_text(self) -> str:
        names = list(self.entries)
        if not names:
            return "none yet"
        shown = ", ".join(names[:MAX_LISTED])
        return shown + (f", and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else "")
