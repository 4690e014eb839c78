"""Draw an export's figure in a child process that a CPU, memory and wall-clock limit
can stop, so that no figure can hold a web worker for minutes or grow it by a gigabyte.

The web process builds the figure's data (a :class:`webapp.compare.assemble.Comparison`,
a :class:`webapp.compare.bars.BarChart` or a
:class:`webapp.compare.significance.Significance`: plain dataclasses and numpy arrays,
the runs left out), pickles it with the formats to draw and starts
``python -m webapp.compare.export_render CPU_SECONDS MEMORY_MB`` (or rather its
equivalent :data:`CHILD_BOOTSTRAP`, which skips ``webapp/__init__``). The child sets
``RLIMIT_CPU`` (that many seconds more than its imports took) and ``RLIMIT_AS`` on
itself *before* it reads its input, draws with matplotlib, and writes the pickled
``{format: bytes}`` to its stdout. The parent waits at most the wall-clock limit
(``subprocess.run(timeout=...)`` kills the child). The figure lives and dies in the
child: the web process never holds a matplotlib figure, and its memory does not grow.

A child stopped by a limit raises :class:`RenderLimitExceeded` here, whose message says
which limit and what to narrow (the views answer it 503). Any other failure of the
child is a bug: :class:`RenderFailed`, with the child's stderr.

The child imports no Django and reads no database: only the export modules, numpy and
matplotlib. It is our own child, so its pickled input is trusted.

The limits: ``EXPORT_RENDER_CPU_SECONDS``, ``EXPORT_RENDER_MEMORY_MB`` and
``EXPORT_RENDER_WALL_SECONDS`` in the settings (``MRL_EXPORT_RENDER_*``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import pickle
import resource
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

REPO = Path(__file__).resolve().parents[2]
KINDS = ("curves", "bars", "significance")
MEMORY_EXIT = 3
"""The child's exit status when an allocation failed under its memory limit."""
BAD_INPUT_EXIT = 2
OUT_OF_MEMORY = (
    "MemoryError",  # Python's allocator
    "bad_alloc",  # C++ (Agg)
    "Cannot allocate memory",  # ENOMEM from the kernel
    "failed to map segment",  # a shared library loaded late
    "Memory allocation",  # OpenBLAS: "Memory allocation still failed ..."
)
"""What a child's stderr says when an allocation (or a library's mapping) failed under
its address-space limit."""
MIB = 1024 * 1024
# What the child inherits of the parent's environment: where matplotlib keeps its font
# cache (else it rebuilds it every time), the locale, the temporary directory; not the
# database URL, the secret key or any other setting.
INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "MPLCONFIGDIR", "XDG_CACHE_HOME")
# One thread each for the numeric libraries: no thread pools (each reserves address
# space that RLIMIT_AS counts), and one core a figure.
THREAD_ENV = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MPLBACKEND": "Agg",
}
NARROW = "fewer metrics, policies or runs, a coarser group_by, or fewer buckets"
CHILD_BOOTSTRAP = (
    "import sys, types\n"
    "package = types.ModuleType('webapp')\n"
    "package.__path__ = [{path!r}]\n"
    "sys.modules['webapp'] = package\n"
    "from webapp.compare.export_render import child_main\n"
    "sys.exit(child_main(sys.argv[1:], sys.stdin.buffer, sys.stdout.buffer))\n"
)
"""The child's program: ``python -m webapp.compare.export_render`` would run
``webapp/__init__``, which imports Celery, kombu and SQLAlchemy for the app object (about
a second, half of the child's start); this registers the ``webapp`` package without
running it, then runs :func:`child_main` as ``-m`` does."""


@dataclass(frozen=True)
class RenderLimits:
    """What one figure's child may spend: CPU seconds (beyond its imports), address space
    in MiB, and seconds of wall clock in all (start and imports included)."""

    cpu_seconds: int
    memory_mb: int
    wall_seconds: float


@dataclass(frozen=True)
class RenderJob:
    """One figure to draw in each of ``formats`` (pdf, svg, png), ``columns`` wide:
    ``kind`` (:data:`KINDS`) says what ``figure`` is."""

    kind: str
    figure: Any
    formats: tuple[str, ...]
    columns: int

    @classmethod
    def of(cls, kind: str, figure: Any, formats: Sequence[str], columns: int) -> RenderJob:
        """The job, with the figure's ``runs`` (Django model instances the drawing never
        reads) left out, so that the child needs no Django to unpickle it."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        if dataclasses.is_dataclass(figure) and any(
            f.name == "runs" for f in dataclasses.fields(figure)
        ):
            figure = dataclasses.replace(figure, runs=[])  # type: ignore[type-var]
        return cls(kind, figure, tuple(formats), columns)


class RenderLimitExceeded(Exception):
    """The child was stopped by a limit: ``limit`` is "time", "cpu" or "memory"."""

    def __init__(self, limit: str, message: str) -> None:
        self.limit = limit
        super().__init__(message)

    def as_json(self) -> dict[str, Any]:
        return {"error": str(self), "limit": self.limit}


class RenderFailed(RuntimeError):
    """The child failed for another reason (a bug): its stderr is in the message."""


# --------------------------------------------------------------------------- the child


def render_job(job: RenderJob) -> dict[str, bytes]:
    """Draw ``job`` here, in this process: ``{format: bytes}``. The child's work."""
    from webapp.compare import bars_export, export, significance_export

    if job.kind == "curves":
        return export.render_figures(job.figure, job.formats, job.columns)
    draw = (
        bars_export.render_bars if job.kind == "bars" else (significance_export.render_significance)
    )
    return {fmt: draw(job.figure, fmt, job.columns) for fmt in job.formats}


def limit_self(cpu_seconds: int, memory_mb: int) -> None:
    """Set this process's CPU limit to ``cpu_seconds`` beyond what it has used so far
    (SIGXCPU then; SIGKILL a second later if that is ignored) and its address space to
    ``memory_mb`` MiB (an allocation past it fails: MemoryError)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(used.ru_utime + used.ru_stime) + max(cpu_seconds, 1)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))
    memory = max(memory_mb, 1) * MIB
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))


def child_main(argv: Sequence[str], stdin: BinaryIO, stdout: BinaryIO) -> int:
    """``CPU_SECONDS MEMORY_MB``: limit this process, read one pickled
    :class:`RenderJob` from ``stdin``, write the pickled ``{format: bytes}`` to
    ``stdout``. Exit status 0, :data:`MEMORY_EXIT` when memory ran out,
    :data:`BAD_INPUT_EXIT` for bad arguments."""
    # Import the drawing code first, canvases included (matplotlib loads them on the
    # first savefig of each format), so the limits bound the drawing, not the imports.
    import matplotlib.backends.backend_agg
    import matplotlib.backends.backend_pdf
    import matplotlib.backends.backend_svg  # noqa: F401

    from webapp.compare import bars_export, export, significance_export  # noqa: F401

    try:
        cpu_seconds, memory_mb = int(argv[0]), int(argv[1])
    except (IndexError, ValueError):
        sys.stderr.write("usage: python -m webapp.compare.export_render CPU_SECONDS MEMORY_MB\n")
        return BAD_INPUT_EXIT
    limit_self(cpu_seconds, memory_mb)
    try:
        job = pickle.load(stdin)
        rendered = render_job(job)
        pickle.dump(rendered, stdout, protocol=pickle.HIGHEST_PROTOCOL)
        stdout.flush()
    except MemoryError:
        sys.stderr.write("MemoryError: the figure needed more than its memory limit\n")
        return MEMORY_EXIT
    return 0


# --------------------------------------------------------------------------- the parent


def child_env() -> dict[str, str]:
    """The child's environment: :data:`INHERITED_ENV` of ours, the checkout on the path,
    :data:`THREAD_ENV`."""
    env = {name: os.environ[name] for name in INHERITED_ENV if name in os.environ}
    return env | THREAD_ENV | {"PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}


def render_in_child(job: RenderJob, limits: RenderLimits) -> dict[str, bytes]:
    """Draw ``job`` in a child process under ``limits``: ``{format: bytes}``.

    Raises :class:`RenderLimitExceeded` when a limit stopped it, :class:`RenderFailed`
    when it failed otherwise."""
    program = CHILD_BOOTSTRAP.format(path=str(REPO / "webapp"))
    command = [sys.executable, "-c", program, str(limits.cpu_seconds), str(limits.memory_mb)]
    payload = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        done = subprocess.run(
            command,
            input=payload,
            capture_output=True,
            timeout=limits.wall_seconds,
            env=child_env(),
            cwd=REPO,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RenderLimitExceeded(
            "time",
            f"export stopped: the figure took longer than {limits.wall_seconds:g} s to draw "
            f"(MRL_EXPORT_RENDER_WALL_SECONDS); draw less: {NARROW}",
        ) from None
    if done.returncode == 0:
        rendered: dict[str, bytes] = pickle.loads(done.stdout)
        return rendered
    raise limit_error(done.returncode, done.stderr, limits)


def limit_error(returncode: int, stderr: bytes, limits: RenderLimits) -> Exception:
    """What a child's exit status says: a :class:`RenderLimitExceeded` for the CPU limit
    (killed by SIGXCPU, or SIGKILL at the hard limit) or the memory limit, else a
    :class:`RenderFailed` with the end of its stderr."""
    text = stderr.decode("utf-8", "replace")
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return RenderLimitExceeded(
            "cpu",
            f"export stopped: the figure took more than {limits.cpu_seconds} s of CPU to "
            f"draw (MRL_EXPORT_RENDER_CPU_SECONDS); draw less: {NARROW}",
        )
    if returncode == MEMORY_EXIT or any(sign in text for sign in OUT_OF_MEMORY):
        return RenderLimitExceeded(
            "memory",
            f"export stopped: the figure needed more than {limits.memory_mb} MB of memory "
            f"to draw (MRL_EXPORT_RENDER_MEMORY_MB); draw less: {NARROW}",
        )
    return RenderFailed(f"the figure's renderer exited with {returncode}: {text[-2000:]}")


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:], sys.stdin.buffer, sys.stdout.buffer))
