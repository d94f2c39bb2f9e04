"""The one parser of every command's arguments (`marljax` commands, benches, `python -m` tools).

A command declares what it takes as `Arguments`: positionals, an optional CONFIG.yaml first,
--flags, key=value options it reads itself, and key=value config overrides. Its usage line is made
from the same declaration, so what a command accepts and what it shows cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marljax.schema import ConfigError, coerce

Convert = Callable[[str, str], Any]  # (the option's name, its text) -> its value; ConfigError naming it if bad


class UsageError(ValueError):
    """Arguments of the wrong shape: a missing or extra positional, an unknown option, a flag without
    its value. One line, which `refusal` ends with the command's usage line."""


def nearest(name: str, choices: Sequence[str]) -> str | None:
    """The choice `name` was most likely meant as (a typo's), or None."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return close[0] if close else None


# ----------------------------------------------------------------------------- value converters


def text(name: str, value: str) -> str:
    return value


def typed(kind: str) -> Convert:
    """A setting's value of `kind` ("int", "float", "bool", "str"), read as a config value is."""
    return lambda name, value: coerce(name, value, kind)


def finite(hint: str = "") -> Convert:
    """A finite number; `hint` says what it is in the message ("a return per agent")."""
    what = f" ({hint})" if hint else ""

    def convert(name: str, value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise ConfigError(name, f"expected a number{what}, got {value!r}") from None
        if not math.isfinite(number):
            raise ConfigError(name, f"expected a finite number{what}, got {value!r}")
        return number

    return convert


def positive(kind: type) -> Convert:
    """A finite number above 0: a whole one for kind=int."""
    what = "a positive whole number" if kind is int else "a positive number"

    def convert(name: str, value: str) -> Any:
        try:
            number = kind(value)
        except ValueError:
            raise ConfigError(name, f"expected {what}, got {value!r}") from None
        if not (number > 0 and math.isfinite(number)):
            raise ConfigError(name, f"expected {what}, got {value!r}")
        return number

    return convert


def number_list(kind: type, minimum: float) -> Convert:
    """A comma-separated list of numbers, each at least `minimum`, as a tuple."""
    what = f"comma-separated {'whole numbers' if kind is int else 'numbers'} >= {minimum:g}"

    def convert(name: str, value: str) -> tuple:
        try:
            numbers = tuple(kind(v) for v in value.split(","))
        except ValueError:
            raise ConfigError(name, f"expected {what}, got {value!r}") from None
        if not all(n >= minimum and math.isfinite(n) for n in numbers):
            raise ConfigError(name, f"expected {what}, got {value!r}")
        return numbers

    return convert


def choice(*choices: str) -> Convert:
    def convert(name: str, value: str) -> str:
        if value not in choices:
            raise ConfigError(name, f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    return convert


# ----------------------------------------------------------------------------- declarations


@dataclass(frozen=True)
class Option:
    """One option: `--name VALUE` (or `--name=VALUE`) when its name starts with --, else `name=VALUE`
    (a key the command reads itself, not a config setting)."""

    name: str
    metavar: str = ""  # its value in the usage line ("M", "4,16,64"); "" for a --switch that takes none
    convert: Convert = text
    default: Any = None
    shown: bool = True  # in the usage line; False: the command's --help alone describes it (a long line stays short)

    @property
    def key(self) -> str:
        """Its name in `Parsed.options`: --device-memory-mib -> device_memory_mib."""
        return self.name.lstrip("-").replace("-", "_")

    @property
    def flag(self) -> bool:
        return self.name.startswith("--")

    def usage(self) -> str:
        if not self.metavar:
            return f"[{self.name}]"
        return f"[{self.name} {self.metavar}]" if self.flag else f"[{self.name}={self.metavar}]"


METAVARS = {"int": "N", "float": "X", "bool": "true|false", "str": "TEXT"}


def options_of(settings: type, shown: Collection[str]) -> tuple[Option, ...]:
    """A settings dataclass's fields as key=value options, typed and defaulted as the fields are; the
    usage line shows those named in `shown`."""
    fields = dataclasses.fields(settings)
    return tuple(Option(f.name, METAVARS[str(f.type)], typed(str(f.type)), f.default, f.name in shown) for f in fields)


@dataclass(frozen=True)
class Parsed:
    """A command's arguments, sorted by kind."""

    args: tuple[str, ...]  # as given (a bench that re-runs itself in a child passes them on)
    positional: list[str]
    config: str | None  # the CONFIG.yaml given first, if any
    options: dict[str, Any]  # every declared option by its key: the value given, else its default
    overrides: list[str]  # key=value config settings, in order


def is_config_file(arg: str) -> bool:
    """A YAML file's path rather than a key=value whose value ends in .yaml."""
    return arg.endswith((".yaml", ".yml")) and ("=" not in arg or Path(arg).is_file())


KEY_VALUES = "[key=value ...]"  # config settings: marljax train --help lists them


@dataclass(frozen=True)
class Arguments:
    """What a command takes, in usage order."""

    positional: tuple[str, ...] = ()  # required, in order: ("RUN_DIR", "POLICY_DIR")
    more: str = ""  # a positional taken any number of times after those ("RUN_DIR|SWEEP_DIR:CELL")
    config: bool = False  # an optional CONFIG.yaml first
    options: tuple[Option, ...] = ()
    overrides: str = ""  # config settings as the usage shows them (KEY_VALUES); "" for a command taking none

    def usage(self) -> str:
        """The arguments as a usage line shows them."""
        words = [
            *self.positional,
            *(["[CONFIG.yaml]"] if self.config else []),
            *([f"{self.more} ..."] if self.more else []),
        ]
        return " ".join(
            [*words, *(o.usage() for o in self.options if o.shown), *([self.overrides] if self.overrides else [])]
        )

    def refusal(self, prog: str, exc: UsageError) -> str:
        """What a UsageError says, in one line: what is wrong, then the usage of `prog` (the command)."""
        return f"{exc} (usage: {' '.join(filter(None, [prog, self.usage()]))})"

    def parse(self, args: Sequence[str]) -> Parsed:
        """The arguments sorted by kind; UsageError for a wrong shape, ConfigError (naming the option)
        for a bad value of a key=value option."""
        by_name = {o.name: o for o in self.options}
        options = {o.key: False if o.flag and not o.metavar else o.default for o in self.options}
        positional: list[str] = []
        overrides: list[str] = []
        rest = list(args)
        config = rest.pop(0) if self.config and rest and is_config_file(rest[0]) else None
        while rest:
            arg = rest.pop(0)
            name, has_value, value = arg.partition("=")
            option = by_name.get(name.strip())
            if arg.startswith("--"):
                option = self._flag(name, option)
                options[option.key] = self._flag_value(option, has_value, value, rest)
            elif has_value and option is not None:
                options[option.key] = option.convert(option.name, value.strip())
            elif has_value and self.overrides:
                overrides.append(arg)
            elif has_value and self._keys() and re.fullmatch(r"[A-Za-z_][\w.]*", name.strip()):
                raise UsageError(self._unknown(name.strip(), self._keys()))
            else:
                positional.append(arg)
        self._count(positional)
        return Parsed(tuple(args), positional, config, options, overrides)

    def _keys(self) -> list[str]:
        return [o.name for o in self.options if not o.flag]

    def _unknown(self, name: str, allowed: list[str]) -> str:
        guess = nearest(name, allowed)
        return f"unknown option {name}" + (f"; did you mean {guess}?" if guess else "")

    def _flag(self, name: str, option: Option | None) -> Option:
        if option is None:
            flags = [o.name for o in self.options if o.flag]
            raise UsageError(self._unknown(name, flags) if flags else f"takes no options, got {name}")
        return option

    def _flag_value(self, option: Option, has_value: str, value: str, rest: list[str]) -> Any:
        """A --flag's value: True for a switch, else the one after = or the next argument, converted."""
        name = option.name
        if not option.metavar:
            if has_value:
                raise UsageError(f"{name} takes no value, got {name}={value}")
            return True
        if not has_value:
            if not rest or rest[0].startswith("--"):
                raise UsageError(f"{name} takes a value")
            value = rest.pop(0)
        try:
            return option.convert(name, value)
        except ConfigError as exc:  # a flag's bad value is a usage error: it ends with the usage line
            raise UsageError(str(exc)) from None

    def _count(self, positional: list[str]) -> None:
        missing = self.positional[len(positional) :]
        if missing:
            raise UsageError(f"missing {' '.join(missing)}")
        extra = positional[len(self.positional) :]
        if extra and not self.more:
            where = " (a CONFIG.yaml comes first)" if self.config and is_config_file(extra[0]) else ""
            raise UsageError(f"unexpected argument {extra[0]!r}{where}")
