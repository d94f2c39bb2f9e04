"""Environment variables that JAX, XLA and matplotlib read, checked by the command line before they
are read: a value they would reject ends in a native abort (XLA_FLAGS) or in their own exception text
(MPLBACKEND, read by matplotlib, which the returns plot imports). Each check raises ConfigError
naming the variable and what it allows; `backend_failure` words JAX's own failure to start the
backends JAX_PLATFORMS names."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from marljax.schema import ConfigError

DEVICE_COUNT = "--xla_force_host_platform_device_count"


def check_xla_flags(environ: Mapping[str, str] = os.environ) -> None:
    """XLA_FLAGS' host device count must be a positive integer: XLA aborts the process on a word
    (its flag parser's fatal error and the list of every flag) and fails to start on 0 or less."""
    for value in re.findall(rf"{DEVICE_COUNT}=(\S*)", environ.get("XLA_FLAGS", "")):
        if not re.fullmatch(r"[0-9]+", value) or int(value) < 1:
            why = f"the number of CPU devices must be a positive integer, e.g. {DEVICE_COUNT}=8"
            raise ConfigError("XLA_FLAGS", f"{DEVICE_COUNT}={value!r}: {why}")


def check_mpl_backend(environ: Mapping[str, str] = os.environ) -> None:
    """MPLBACKEND must name a matplotlib backend; matplotlib (imported by the returns plot and by several JaxMARL envs)
    refuses to import otherwise. Checked with the variable set aside, as matplotlib's import reads it."""
    value = environ.get("MPLBACKEND")
    if not value:
        return
    saved = os.environ.pop("MPLBACKEND", None)
    try:
        import matplotlib  # noqa: F401 - rcsetup needs the package
        from matplotlib import rcsetup

        rcsetup.validate_backend(value)
    except ImportError:
        return  # no matplotlib here: nothing reads the variable
    except ValueError:
        allowed = ", ".join(sorted({"agg", "pdf", "svg", "ps", "cairo", "tkagg", "qtagg", "webagg"}))
        why = "the returns plot and several JaxMARL envs import matplotlib, which reads it"
        raise ConfigError(
            "MPLBACKEND", f"{value!r} is not a matplotlib backend ({why}); allowed: {allowed}, ... or module://NAME"
        ) from None
    finally:
        if saved is not None:
            os.environ["MPLBACKEND"] = saved


def check_environment(environ: Mapping[str, str] = os.environ) -> None:
    """Every check above: before a command imports JAX or matplotlib."""
    check_xla_flags(environ)
    check_mpl_backend(environ)


def backend_failure(exc: BaseException, environ: Mapping[str, str] = os.environ) -> str | None:
    """JAX's `Unable to initialize backend 'rocm'` when JAX_PLATFORMS names a backend this machine
    lacks (`gpu` tries CUDA, then ROCm, and names the last), in marljax's words; None for any other failure."""
    text = str(exc)
    if not isinstance(exc, RuntimeError) or "Unable to initialize backend" not in text:
        return None
    platforms = environ.get("JAX_PLATFORMS", "")
    known = re.search(r"known backends: \[([^\]]*)\]", text)
    here = f" (the installed jax knows {known[1].replace(chr(39), '')})" if known else ""
    if platforms:
        way_out = "unset JAX_PLATFORMS to use what the machine has, or name a backend it has (marljax doctor)"
        return f"JAX_PLATFORMS={platforms}: JAX cannot start that backend on this machine{here}; {way_out}"
    first = text.splitlines()[0][:300]
    return f"JAX cannot start its backend ({first}); marljax doctor says which jax build is installed"
