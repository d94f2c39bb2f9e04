"""JAX's persistent compilation cache, on by default: a program compiled once is read back by the
next process that compiles it (a rerun, another seed, a resume, an evaluation, a sweep cell).

`compile_cache=auto` (the default) uses `$XDG_CACHE_HOME/marljax/jax-compile/<machine>` (else
`~/.cache/...`), unless JAX_COMPILATION_CACHE_DIR is set, which then wins; `compile_cache=false`
turns it off; any other value is the directory to use. JAX keys every entry by the program, the
jaxlib version, the backend and its version, the XLA flags, the compile options and the devices,
so one directory serves every jax version and accelerator (GPU and TPU programs, and on a GPU XLA's
autotuning results, are kept the same way as CPU ones). Every program is kept, not only those JAX
deems slow to compile (its default: over 1 s). It does not key a CPU program by the
CPU's instruction set, so `<machine>` does: a hash of the CPU's model and feature flags, so that a
home directory shared by machines of different CPUs never hands one an executable built for
another. A damaged entry costs one compile: JAX's warning about it becomes one line on stderr.
"""

from __future__ import annotations

import collections
import hashlib
import os
import platform
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from marljax.run_settings import COMPILE_CACHE_AUTO as AUTO
from marljax.run_settings import COMPILE_CACHE_OFF as OFF

_JAX_ENTRY_ERRORS = (
    "Error reading persistent compilation cache entry",
    "Error writing persistent compilation cache entry",
)


def machine_tag(cpuinfo: str | None = None) -> str:
    """12 hex digits naming this machine's CPU: its architecture, and the model name and feature
    flags of its first CPU in `cpuinfo` (/proc/cpuinfo's text; read here when None)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = platform.processor()
    facts = [platform.machine()]
    for key in ("model name", "flags", "Features"):  # Features: arm64's flags
        line = next((row for row in cpuinfo.splitlines() if row.split(":", 1)[0].strip() == key), None)
        facts.append(line.split(":", 1)[-1].strip() if line else "")
    return hashlib.sha256("\n".join(facts).encode()).hexdigest()[:12]


def default_dir(environ: Mapping[str, str] = os.environ) -> Path:
    base = Path(environ.get("XDG_CACHE_HOME") or Path(environ.get("HOME") or Path.home()) / ".cache")
    return base / "marljax" / "jax-compile" / machine_tag()


def chosen_dir(value: Any, environ: Mapping[str, str] = os.environ) -> Path | None:
    """The directory `compile_cache=value` means here (None: no cache)."""
    if value in OFF:
        return None
    if value in AUTO:
        return (
            Path(environ["JAX_COMPILATION_CACHE_DIR"])
            if environ.get("JAX_COMPILATION_CACHE_DIR")
            else default_dir(environ)
        )
    return Path(os.path.expanduser(str(value)))


def use(value: Any, log: Callable[[str], None] = print) -> Path | None:
    """Point JAX's persistent cache at the directory `compile_cache=value` names, before anything
    compiles; returns it, or None when the cache is off or cannot be used (said in one line: the
    run goes on, compiling as it would without a cache)."""
    import jax

    path = chosen_dir(value)
    if path is None:
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError("not writable")
    except OSError as e:
        log(
            f"compile_cache: cannot use {path} ({e.strerror or e}); compiling without a cache "
            "(compile_cache=false silences this, compile_cache=DIR picks another)"
        )
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    # every program, however quick to compile: JAX's default keeps only those over 1 s, which leaves
    # out the ~90 small ones a run compiles (the env's import-time constants, init, the NaN guard, ...;
    # 6 s of a warm default run on a 2-core CPU, where the chunk program read back takes 0.5 s)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    _one_line_notes()
    return path


_hooked = False


def _one_line_notes() -> None:
    """JAX warns, with its own source line, when a cache entry cannot be read (damaged, truncated)
    or written (a full disk); it then compiles as if there were no cache. Say that in one line."""
    global _hooked
    if _hooked:
        return
    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001 - warnings' own signature
        text = str(message)
        if text.startswith(_JAX_ENTRY_ERRORS):
            what = "read" if "reading" in text else "written"
            print(
                f"marljax: a compile cache entry could not be {what} ({text.split(': ', 1)[-1][:200]}); "
                "compiled afresh",
                file=sys.stderr,
            )
            return
        previous(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    _hooked = True


class CacheEvents:
    """Counts JAX's persistent-cache hits and misses while in a `with` block (jax.monitoring events)."""

    def __init__(self) -> None:
        self.hits = self.misses = 0

    def _listen(self, event: str, **_: Any) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            self.hits += 1
        elif event == "/jax/compilation_cache/cache_misses":
            self.misses += 1

    def __enter__(self) -> CacheEvents:
        import jax

        jax.monitoring.register_event_listener(self._listen)
        return self

    def __exit__(self, *exc: Any) -> None:
        import jax

        jax.monitoring.unregister_event_listener(self._listen)


_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
_LOWERING_LOGGER = "jax._src.interpreters.pxla"  # says "Compiling <module> with global shapes and types <avals>"


class Compiled(NamedTuple):
    """One program XLA compiled (or read back from the persistent cache) while a `CompileLog` listened."""

    name: str  # JAX's name for it: `jit(fn)` of the jitted function `fn`
    seconds: float  # the backend compile (or the cache read) only; tracing and lowering are apart
    cached: bool  # read back from the persistent cache
    where: tuple[str, ...]  # `module.function` of the marljax frames on the stack then, innermost first
    shapes: str  # the argument shapes and dtypes it was lowered for ("" when JAX did not say)


class CompileLog:
    """Every program compiled while in a `with` block: jax.monitoring's backend compile events,
    which JAX records for every jit, ahead-of-time compile and eager op it compiles, with the
    argument shapes JAX's lowering logs at debug level (nothing is printed).

    `repeats()` lists the names compiled more than once with the same argument shapes: a compile
    JAX's in-memory cache may not have saved (a jit made afresh per call), or one that differs in
    what the shapes do not show (a static argument, a closed-over constant)."""

    def __init__(self, stack: bool = True) -> None:
        import logging

        self.programs: list[Compiled] = []
        self._stack, self._hit = stack, False
        self._shapes: dict[str, str] = {}
        log = self

        class Lowered(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if str(record.msg).startswith("Compiling") and isinstance(record.args, tuple) and record.args:
                    log._shapes[str(record.args[0])] = str(record.args[1])

        self._handler = Lowered(logging.DEBUG)

    def _event(self, event: str, **_: Any) -> None:
        if event == "/jax/compilation_cache/cache_hits":  # said inside the compile it belongs to
            self._hit = True

    def _duration(self, event: str, duration_secs: float, fun_name: str | int = "?", **_: str | int) -> None:
        if event != _BACKEND_COMPILE:
            return
        where: tuple[str, ...] = ()
        if self._stack:
            import traceback

            where = tuple(
                f"{Path(f.filename).stem}.{f.name}"
                for f in reversed(traceback.extract_stack())
                if "/marljax/" in f.filename and not f.filename.endswith("compile_cache.py")
            )
        name = str(fun_name)
        shapes = self._shapes.pop(name, "")  # the lowering just before, of the same name
        self.programs.append(Compiled(name, float(duration_secs), self._hit, where, shapes))
        self._hit = False

    def counts(self) -> dict[str, int]:
        """name -> how many times a program of that name was compiled (any shapes)."""
        return dict(collections.Counter(p.name for p in self.programs))

    def repeats(self) -> dict[tuple[str, str], int]:
        """(name, shapes) -> times compiled, for those compiled more than once."""
        counted = collections.Counter((p.name, p.shapes) for p in self.programs)
        return {k: n for k, n in counted.items() if n > 1}

    def __enter__(self) -> CompileLog:
        import logging

        import jax

        logger = logging.getLogger(_LOWERING_LOGGER)
        self._level, self._propagate = logger.level, logger.propagate
        logger.addHandler(self._handler)
        if not jax.config.jax_log_compiles:  # type: ignore[attr-defined]  # a flag jax sets on its config object  # debug records only to our handler, not to stderr
            logger.setLevel(logging.DEBUG)
            logger.propagate = False
        jax.monitoring.register_event_listener(self._event)
        jax.monitoring.register_event_duration_secs_listener(self._duration)
        return self

    def __exit__(self, *exc: Any) -> None:
        import logging

        import jax

        jax.monitoring.unregister_event_listener(self._event)
        jax.monitoring.unregister_event_duration_listener(self._duration)
        logger = logging.getLogger(_LOWERING_LOGGER)
        logger.removeHandler(self._handler)
        logger.setLevel(self._level)
        logger.propagate = self._propagate
