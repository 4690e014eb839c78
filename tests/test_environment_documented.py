"""Every environment variable the settings read is declared in ``webapp/env_vars.py``,
and ``docs/ENVIRONMENT.md`` is the table generated from it (issue 32).

The reads are collected from the source of ``webapp/settings.py`` (AST), not by running
it: a read inside an ``if PRODUCTION:`` branch counts as much as one at the top. A read
whose name is not a string literal fails the test, so no variable can hide behind a
computed name. No database is needed.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from webapp.env_vars import ENV_VARS, markdown

REPO = Path(__file__).resolve().parents[1]
SETTINGS = REPO / "webapp" / "settings.py"
DOC = REPO / "docs" / "ENVIRONMENT.md"

# django-environ's readers: env.<method>(name, default=...) reads the variable `name`.
ENV_READERS = {
    *("str", "bool", "int", "float", "json", "list", "tuple", "dict", "url", "path"),
    *("bytes", "get_value", "db_url", "db", "cache_url", "cache", "email_url", "email"),
    *("search_url", "channels_url", "channels"),
}
# The readers that take no name read a fixed one (django-environ's DEFAULT_*_ENV).
ENV_READER_DEFAULT_NAMES = {
    "db_url": "DATABASE_URL",
    "db": "DATABASE_URL",
    "cache_url": "CACHE_URL",
    "cache": "CACHE_URL",
    "email_url": "EMAIL_URL",
    "email": "EMAIL_URL",
    "search_url": "SEARCH_URL",
    "channels_url": "CHANNELS_URL",
    "channels": "CHANNELS_URL",
}
# Methods of an Env object that read no variable.
ENV_NON_READERS = {"read_env", "parse_value", "smart_cast"} | {
    f"{kind}_url_config" for kind in ("db", "cache", "email", "search", "channels")
}
OS_ENVIRON_READERS = {"get", "setdefault", "pop"}


@dataclass(frozen=True)
class Read:
    name: str
    default: ast.expr | None
    line: int


class _Wrapper:
    """A function of the settings module that reads the variable named by one of its
    parameters (``env_bool(name, default)``): calls to it are reads."""

    def __init__(self, node: ast.FunctionDef, name_param: str) -> None:
        params = [*node.args.posonlyargs, *node.args.args]
        self.positions = [p.arg for p in params]
        self.name_param = name_param
        self.default_param = "default" if "default" in self.positions else None
        self.kwonly = [p.arg for p in node.args.kwonlyargs]
        if self.default_param is None and "default" in self.kwonly:
            self.default_param = "default"

    def argument(self, call: ast.Call, param: str | None) -> ast.expr | None:
        if param is None:
            return None
        for keyword in call.keywords:
            if keyword.arg == param:
                return keyword.value
        if param in self.positions:
            index = self.positions.index(param)
            if index < len(call.args):
                return call.args[index]
        return None


class EnvReadCollector:
    """Collects the environment reads of one module's source.

    Recognised: ``env("X")``, ``env.<reader>("X", ...)`` on any name bound to
    ``environ.Env()`` (and ``env``), ``os.environ.get/setdefault/pop("X")``,
    ``os.environ["X"]``, ``"X" in os.environ``, ``os.getenv("X")`` (also through ``from os
    import environ, getenv``), and calls to module functions that pass one of their
    parameters as the name to any of these (found to a fixed point, so a wrapper of a
    wrapper counts). Anything that looks like a read but cannot be resolved to a literal
    name is listed in :attr:`unresolved`."""

    def __init__(self, source: str) -> None:
        self.tree = ast.parse(source)
        self.env_names = {"env"}
        self.os_names: set[str] = set()
        self.environ_names: set[str] = set()  # os.environ under a local name
        self.getenv_names: set[str] = set()
        self._bind_names()
        self.reads: list[Read] = []
        self.unresolved: list[str] = []
        self._fixed: str | None = None
        self.wrappers: dict[str, _Wrapper] = {}
        self._find_wrappers()
        self._collect()

    # -- names --------------------------------------------------------------------------
    def _bind_names(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "os":
                        self.os_names.add(alias.asname or "os")
            elif isinstance(node, ast.ImportFrom) and node.module == "os":
                for alias in node.names:
                    if alias.name == "environ":
                        self.environ_names.add(alias.asname or "environ")
                    elif alias.name == "getenv":
                        self.getenv_names.add(alias.asname or "getenv")
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                func = node.value.func
                if (isinstance(func, ast.Attribute) and func.attr == "Env") or (
                    isinstance(func, ast.Name) and func.id == "Env"
                ):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            self.env_names.add(target.id)

    def _is_os_environ(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.environ_names
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "environ"
            and isinstance(node.value, ast.Name)
            and node.value.id in self.os_names
        )

    # -- one call or expression ---------------------------------------------------------
    def _read_of(self, node: ast.AST) -> tuple[ast.expr | None, ast.expr | None] | None:
        """(name expression, default expression) if ``node`` reads the environment, else
        None. A name expression of None means the read names a fixed variable (set in
        ``self._fixed``)."""
        self._fixed: str | None = None
        if isinstance(node, ast.Subscript) and self._is_os_environ(node.value):
            return node.slice, None
        if (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], ast.In | ast.NotIn)
            and self._is_os_environ(node.comparators[0])
        ):
            return node.left, None
        if not isinstance(node, ast.Call):
            return None
        func = node.func
        first = node.args[0] if node.args else _keyword(node, "var")
        default = node.args[1] if len(node.args) > 1 else _keyword(node, "default")
        if isinstance(func, ast.Name):
            if func.id in self.env_names or func.id in self.getenv_names:
                return first, default
            if func.id in self.wrappers:
                wrapper = self.wrappers[func.id]
                return (
                    wrapper.argument(node, wrapper.name_param),
                    wrapper.argument(node, wrapper.default_param),
                )
            return None
        if not isinstance(func, ast.Attribute):
            return None
        owner = func.value
        if isinstance(owner, ast.Name) and owner.id in self.env_names:
            if func.attr in ENV_NON_READERS:
                return None
            if func.attr not in ENV_READERS:
                self.unresolved.append(f"line {node.lineno}: unknown reader env.{func.attr}")
                return None
            if first is None and func.attr in ENV_READER_DEFAULT_NAMES:
                self._fixed = ENV_READER_DEFAULT_NAMES[func.attr]
            return first, default
        if isinstance(owner, ast.Name) and owner.id in self.os_names and func.attr == "getenv":
            return first, default
        if self._is_os_environ(owner) and func.attr in OS_ENVIRON_READERS:
            return first, default
        return None

    # -- wrappers -----------------------------------------------------------------------
    def _find_wrappers(self) -> None:
        functions = [
            node
            for node in ast.walk(self.tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        changed = True
        while changed:
            changed = False
            for function in functions:
                if function.name in self.wrappers:
                    continue
                params = {p.arg for p in [*function.args.posonlyargs, *function.args.args]}
                params |= {p.arg for p in function.args.kwonlyargs}
                for node in ast.walk(function):
                    found = self._read_of(node)
                    if found is None:
                        continue
                    name = found[0]
                    if isinstance(name, ast.Name) and name.id in params:
                        self.wrappers[function.name] = _Wrapper(function, name.id)
                        changed = True
                        break
        self.unresolved.clear()

    # -- the module ---------------------------------------------------------------------
    def _collect(self) -> None:
        wrapper_bodies = {
            id(inner)
            for function in ast.walk(self.tree)
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
            and function.name in self.wrappers
            for inner in ast.walk(function)
        }
        for node in ast.walk(self.tree):
            found = self._read_of(node)
            if found is None:
                continue
            name, default = found
            if self._fixed is not None:
                self.reads.append(Read(self._fixed, default, node.lineno))
            elif isinstance(name, ast.Constant) and isinstance(name.value, str):
                self.reads.append(Read(name.value, default, node.lineno))
            elif id(node) not in wrapper_bodies:
                shown = ast.unparse(name) if name is not None else "no name"
                self.unresolved.append(f"line {node.lineno}: reads {shown}")

    @property
    def names(self) -> set[str]:
        return {read.name for read in self.reads}


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def settings_reads() -> EnvReadCollector:
    return EnvReadCollector(SETTINGS.read_text())


DECLARED = {var.name: var for var in ENV_VARS}


# --- the collector finds what it should (so the tests below can fail) -------------------
PATTERNS = {
    "env_call": 'env("X_VAR")',
    "env_str": 'env.str("X_VAR", default="")',
    "env_int": 'env.int("X_VAR", default=3)',
    "env_bool": 'env.bool("X_VAR", default=False)',
    "env_list": 'env.list("X_VAR", default=[])',
    "env_float": 'env.float("X_VAR", default=0.5)',
    "env_json": 'env.json("X_VAR", default={})',
    "env_db_url": 'env.db_url("X_VAR", default="sqlite://")',
    "env_keyword": 'env.str(var="X_VAR")',
    "renamed_env": 'other = environ.Env()\nother.int("X_VAR", default=1)',
    "os_environ_get": 'os.environ.get("X_VAR")',
    "os_environ_setdefault": 'os.environ.setdefault("X_VAR", "1")',
    "os_environ_subscript": 'os.environ["X_VAR"]',
    "os_environ_in": '"X_VAR" in os.environ',
    "os_getenv": 'os.getenv("X_VAR", "a")',
    "from_os_getenv": 'from os import getenv\ngetenv("X_VAR")',
    "from_os_environ": 'from os import environ as e\ne.get("X_VAR")',
    "nested_in_branch": 'if PRODUCTION:\n    A = {"k": [env.int("X_VAR", default=1)]}',
    "wrapper": textwrap.dedent(
        """
        def read_flag(name, default):
            raw = env.str(name, default="")
            return raw or default
        FLAG = read_flag("X_VAR", True)
        """
    ),
    "wrapper_of_wrapper": textwrap.dedent(
        """
        def raw(key):
            return os.environ.get(key, "")
        def seconds(key, default=0.0):
            return float(raw(key) or default)
        S = seconds("X_VAR", default=2.0)
        """
    ),
}


@pytest.mark.parametrize("snippet", PATTERNS.values(), ids=PATTERNS.keys())
def test_the_collector_finds_a_read_in_each_pattern(snippet: str) -> None:
    collector = EnvReadCollector("import os\nimport environ\nenv = environ.Env()\n" + snippet)
    assert collector.names == {"X_VAR"}
    assert collector.unresolved == []


def test_the_collector_finds_defaults_and_db_urls_without_a_name() -> None:
    collector = EnvReadCollector(
        "import environ\nenv = environ.Env()\nD = env.db_url()\n"
        "def flag(name, default):\n    return env.bool(name, default=default)\n"
        "F = flag('X_FLAG', True)\nN = env.int('X_N', default=7)\n"
    )
    assert collector.names == {"DATABASE_URL", "X_FLAG", "X_N"}
    defaults = {read.name: read.default for read in collector.reads}
    assert _literal(defaults["X_FLAG"]) is True
    assert _literal(defaults["X_N"]) == 7


@pytest.mark.parametrize(
    "snippet",
    ['env.str(NAME, default="")', 'os.environ.get(f"X_{k}")', 'env.secret("X")'],
    ids=["computed_name", "f_string_name", "unknown_reader"],
)
def test_a_read_the_collector_cannot_resolve_is_reported(snippet: str) -> None:
    collector = EnvReadCollector("import os\nimport environ\nenv = environ.Env()\n" + snippet)
    assert collector.unresolved, "an unresolvable read must fail the test, not vanish"


def test_code_that_reads_nothing_is_not_a_read() -> None:
    collector = EnvReadCollector(
        'import os\nimport environ\nenv = environ.Env()\nd = {"a": 1}\nd.get("X")\n'
        'os.cpu_count()\nos.path.join("a", "b")\nenv.read_env("/dev/null")\n'
        'x = other["X"]\nraise environ.ImproperlyConfigured("X_VAR")\n'
    )
    assert collector.names == set()
    assert collector.unresolved == []


# --- the settings ----------------------------------------------------------------------
def test_every_variable_the_settings_read_is_declared() -> None:
    collector = settings_reads()
    assert collector.unresolved == [], "settings read a variable by a name not written out"
    assert "env_bool" in collector.wrappers  # the strict boolean reader is seen through
    undeclared = sorted(collector.names - DECLARED.keys())
    assert undeclared == [], (
        f"webapp/settings.py reads {undeclared}, not declared in webapp/env_vars.py: add "
        "them there, then run `python -m webapp.env_vars > docs/ENVIRONMENT.md`"
    )


def test_no_declared_variable_is_stale() -> None:
    stale = sorted(DECLARED.keys() - settings_reads().names)
    assert stale == [], f"webapp/env_vars.py declares {stale}, which the settings never read"


def test_each_variable_is_declared_once() -> None:
    names = [var.name for var in ENV_VARS]
    assert len(names) == len(set(names))
    assert all(var.default.strip() and var.help.strip() and var.area for var in ENV_VARS)


def test_the_environment_doc_is_the_generated_table() -> None:
    assert DOC.read_text() == markdown(), (
        "docs/ENVIRONMENT.md is stale: run `python -m webapp.env_vars > docs/ENVIRONMENT.md`"
    )
    for var in ENV_VARS:
        assert f"| `{var.name}` |" in DOC.read_text()


def test_the_readme_and_the_settings_point_to_the_table() -> None:
    assert "docs/ENVIRONMENT.md" in (REPO / "README.md").read_text()
    assert "docs/ENVIRONMENT.md" in (ast.get_docstring(ast.parse(SETTINGS.read_text())) or "")


def test_a_literal_default_agrees_with_the_declared_one() -> None:
    """Where the settings' default is a plain number, boolean or non-empty string, the
    declared default starts with it in backticks (``5`` for ``5.0``, ``true`` for True)."""
    wrong = []
    for read in settings_reads().reads:
        value = _literal(read.default)
        if value is None or value == "":
            continue
        declared = DECLARED[read.name].default
        if not declared.startswith("`"):
            wrong.append(f"{read.name}: settings {value!r}, declared {declared!r}")
            continue
        shown = declared[1:].split("`", 1)[0]
        if isinstance(value, bool):
            ok = shown == str(value).lower()
        elif isinstance(value, int | float):
            try:
                ok = float(shown) == float(value)
            except ValueError:
                ok = False
        else:
            ok = shown == value
        if not ok:
            wrong.append(f"{read.name}: settings {value!r}, declared {declared!r}")
    assert wrong == []


def _literal(node: ast.expr | None) -> object:
    if isinstance(node, ast.Constant) and isinstance(node.value, str | int | float | bool):
        return node.value
    return None
