"""Static file finders that answer "not found" for a path leaving their directories.

Django's finders join the requested path to each static directory with ``safe_join``,
which raises ``SuspiciousFileOperation`` for ``../`` instead of finding nothing. The
development static handler (``runserver`` with DEBUG on, or ``--insecure``) only turns
``Http404`` into a response, so ``/static/%2e%2e/%2e%2e/etc/passwd`` (decoded to ``..``
by the server) escaped as an exception: a 500. WhiteNoise's finder mode
(``WHITENOISE_USE_FINDERS``) asks the same finders. These subclasses refuse such a path
before touching the filesystem (``..``, a backslash, NUL), and treat what ``safe_join``
still refuses as not found, so every mode answers 404. ``settings.STATICFILES_FINDERS``
names them.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from django.contrib.staticfiles import finders
from django.core.exceptions import SuspiciousFileOperation


def is_contained(path: str) -> bool:
    """Whether ``path`` (relative to the static root) stays below it syntactically."""
    if "\\" in path or "\x00" in path:
        return False
    return ".." not in PurePosixPath(path).parts


class _ContainedMixin:
    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> Any:
        # Django's finders answer [] for "nothing here", whether or not find_all is set.
        if not is_contained(path):
            return []
        try:
            return super().find(path, find_all=find_all, **kwargs)  # type: ignore[misc]
        except SuspiciousFileOperation:
            return []


class FileSystemFinder(_ContainedMixin, finders.FileSystemFinder):
    """``STATICFILES_DIRS``, with paths outside them not found."""


class AppDirectoriesFinder(_ContainedMixin, finders.AppDirectoriesFinder):
    """Each app's ``static/``, with paths outside it not found."""
