"""Choices that depend on the backend a program is compiled for, in one place, each chosen by a
measurement on that backend (docs/performance.md, "Backend-specific choices").

`choices()` is read at trace time, so a program compiled for the card and one compiled for the
host CPU in the same process (async mode's CPU actors) each get their own backend's. On a CPU every
choice is what marljax did before the choices existed, so CPU runs keep their numbers bitwise.
"""

from __future__ import annotations

import dataclasses
import os

import jax

# where the choice is forced, for a measurement that compares both on one backend (the GPU protocol)
_FORCE = "MARLJAX_BACKEND_CHOICES"


@dataclasses.dataclass(frozen=True)
class Choices:
    """What a program compiled for one backend does."""

    gae: str  # "scan": a T-trip serial loop; "associative": log2(T) vectorised levels, no loop
    conv: str  # "patch": k x k patches and one matmul (nn/networks.py); "xla": the convolution itself


ALLOWED = {"gae": ("scan", "associative"), "conv": ("patch", "xla")}

# CPU: the serial GAE scan ran 1.6-2.2x faster than the associative one (experiments/backend_choices.py);
# the patch convolution's gradient 6-10x faster than a vmapped grouped convolution's (experiments/conv_gradient.py)
CPU = Choices(gae="scan", conv="patch")
# accelerators: a loop trip costs a host round trip on the GPU and a 3x3 convolution is what cuDNN and the
# TPU's MXU are built for (experiments/backend_choices.py on the card)
ACCELERATOR = Choices(gae="associative", conv="xla")


def choices(platform: str | None = None) -> Choices:
    """The choices for `platform` ("cpu", "gpu", "tpu"; default: JAX's default backend), unless
    MARLJAX_BACKEND_CHOICES=field=value[,field=value] forces some (a measurement's A/B)."""
    platform = platform or jax.default_backend()
    chosen = CPU if platform == "cpu" else ACCELERATOR
    forced = os.environ.get(_FORCE, "")
    for item in filter(None, forced.split(",")):
        field, _, value = item.partition("=")
        if value not in ALLOWED.get(field, ()):
            allowed = "; ".join(f"{k}={'|'.join(v)}" for k, v in ALLOWED.items())
            raise ValueError(f"{_FORCE}: {item!r} is not a choice; allowed: {allowed}")
        chosen = dataclasses.replace(chosen, **{field: value})
    return chosen
