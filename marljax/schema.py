"""The settings engine: it knows no field. Each layer declares its settings beside its code and
registers them here; `marljax.config` assembles them into the run's one frozen `Config`.

A *part* is a frozen dataclass of `setting(...)` fields that a layer registers under a key
(`register_part`): a flat part's fields are top-level keys (`num_envs=`, `out_dir=`), a nested
one's sit under its key (`mesh.seed=`, `log.backends=`). Parts are laid out by their `order` (the
keys of config.yaml and `--help` follow it), whoever imports first. An *optional* part is an
algorithm section that every algorithm supporting it takes (`async.*`). Algorithms register their
own sections with `register_schema`; file formats (JaxMARL's YAML) with `register_file_format`.

Every field declares one line of help (`--help` is generated from it), its allowed values, and
whether it is `traced` (a float hyperparameter carried in the learner state, which a sweep can
vmap) or `resumable` (may change when a run is resumed); `jaxmarl=` names JaxMARL's UPPERCASE keys
that mean it. Values come from YAML (a strict loader) and `key=value` overrides; they are coerced
to the declared types and checked against the metadata here, before anything compiles, and every
error names the field and what is allowed. This module imports no other marljax module.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A bad configuration value. The message names the field and what is allowed."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    factory: Callable[[], Any] | None = None,
    choices: tuple = (),
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | None = None,
    traced: bool = False,
    resumable: bool = False,
    jaxmarl: str | tuple[str, ...] = (),
    mapping: str = "",
) -> Any:
    """A config field with its help line and constraints, checked by `check_field`.

    `minimum`/`maximum`: inclusive bounds; `above`: exclusive lower bound. `traced`: a float
    hyperparameter carried as a traced scalar (sweeps vmap it). `resumable`: may change on resume.
    `jaxmarl`: JaxMARL's UPPERCASE config keys that mean this setting, in its units
    (marljax/jaxmarl_config.py translates through them). `mapping`: a free-form mapping whose keys
    are the user's, not the schema's; "deep" merges per key, "shallow" replaces each key's value.
    """
    meta = {"help": help, "choices": tuple(choices), "minimum": minimum, "above": above, "maximum": maximum,
            "traced": traced, "resumable": resumable, "mapping": mapping,
            "jaxmarl": (jaxmarl,) if isinstance(jaxmarl, str) else tuple(jaxmarl)}  # fmt: skip
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def fields(cls) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


# ----------------------------------------------------------------------------- registries


class Part(typing.NamedTuple):
    """One layer's settings: `cls` under `key` (flat: its fields are top-level keys)."""

    key: str
    cls: type
    order: int  # where it sits among the parts (config.yaml, --help)
    flat: bool = False
    help: str = ""
    shorthand: Mapping[str, Mapping] = {}  # a scalar the whole section may be given as (distributed=auto)
    when: Callable[[Any], bool] | None = None  # optional: an algorithm section of those whose supports say so


_PARTS: dict[str, Part] = {}
_SCHEMAS: dict[str, Any] = {}  # algorithm name -> its schema (marljax.config.AlgorithmSchema)
RENAMED: dict[str, tuple[str, ...]] = {}  # a key whose name changed -> the dotted keys it became


def register_part(part: Part) -> None:
    """Make a layer's settings part of every run's config (`when`: of the algorithms that support it)."""
    taken = {k for p in parts() if p.flat and p.key != part.key for k in fields(p.cls)}
    taken |= {p.key for p in _PARTS.values() if p.key != part.key}
    clash = (set(fields(part.cls)) if part.flat else {part.key}) & taken
    if clash:
        raise ValueError(f"{part.key}: keys already registered by another part: {sorted(clash)}")
    _PARTS[part.key] = part
    for name, schema in list(_SCHEMAS.items()):  # an optional part registered after an algorithm
        register_schema(schema)


def parts() -> list[Part]:
    """The parts every run has, in their order."""
    return sorted((p for p in _PARTS.values() if p.when is None), key=lambda p: p.order)


def register_schema(schema: Any) -> None:
    """Make `algo=schema.name` known (`marljax.algos.registry.register` calls this); the optional
    parts its supports ask for join its sections."""
    sections = dict(schema.sections)
    for part in sorted(_PARTS.values(), key=lambda p: p.order):
        if part.when is not None and part.when(schema.supports):
            sections.setdefault(part.key, part.cls)
    _SCHEMAS[schema.name] = dataclasses.replace(schema, sections=sections)


def algorithm_schema(name: str) -> Any:
    if name not in _SCHEMAS:
        one_of("algo", name, tuple(_SCHEMAS))
    return _SCHEMAS[name]


def algorithms() -> tuple[str, ...]:
    """Every registered algorithm's name, in registration order."""
    return tuple(_SCHEMAS)


def schemas() -> tuple[Any, ...]:
    return tuple(_SCHEMAS.values())


class FileFormat(typing.NamedTuple):
    """Another project's config files, read into marljax's keys: JaxMARL's UPPERCASE baseline YAML
    (marljax/jaxmarl_config.py). A reader sits above the config (it asks envs/ whether the env can
    be built here), so it registers itself here; the package's __init__ imports it, so it is
    registered before any load_config runs."""

    claims: Callable[[Mapping[str, Any]], bool]  # are these a file's values in this format?
    read: Callable[[Mapping[str, Any], Path, str | None], dict]  # (values, path, algo= override) -> marljax's mapping


FILE_FORMATS: list[FileFormat] = []


def register_file_format(file_format: FileFormat) -> None:
    if file_format not in FILE_FORMATS:
        FILE_FORMATS.append(file_format)


# ----------------------------------------------------------------------------- the assembled settings


class Settings:
    """A run's frozen settings: every part's values, then the algorithm's sections. A flat part's
    fields are attributes (`config.num_envs`), a nested part is one (`config.mesh.seed`), and so
    is each section (`config.ppo.clip_eps`; the `async` section as `config.async_`)."""

    def __init__(self, values: Mapping[str, Any] | None = None, sections: Mapping[str, Any] | None = None):
        values, index = {p.key: p.cls() for p in parts()} if values is None else values, {}
        for part in parts():
            value = values[part.key]
            index.update({name: getattr(value, name) for name in fields(part.cls)} if part.flat else {part.key: value})
        self.__dict__.update(_parts=dict(values), _index=index, sections=dict(sections or {}))

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __getattr__(self, name: str) -> Any:
        index, sections = self.__dict__.get("_index"), self.__dict__.get("sections")
        if index is None or sections is None or name.startswith("__"):
            raise AttributeError(name)
        if name in index:
            return index[name]
        key = name[:-1] if name.endswith("_") else name
        if key in sections:
            return sections[key]
        raise AttributeError(f"algo={index.get('algo')} has no field or section {name!r} "
                             f"(its sections: {', '.join(sections) or 'none'})")  # fmt: skip

    def part(self, key: str) -> Any:
        """The registered part `key` (a flat one too): what a layer's functions receive."""
        return self.__dict__["_parts"][key]

    def value(self, dotted: str) -> Any:
        """The value of a dotted key: `lr`, `ppo.clip_eps`, `mesh.data`."""
        node: Any = self
        for name in dotted.split("."):
            node = node.sections[name] if node is self and name in self.sections else getattr(node, name)
        return node

    def to_dict(self) -> dict:
        """Every part's fields, then the algorithm's sections, as nested plain values (config.yaml)."""
        out: dict[str, Any] = {}
        for part in parts():
            value = dataclasses.asdict(self.part(part.key))
            out.update(value if part.flat else {part.key: value})
        out.update({name: dataclasses.asdict(section) for name, section in self.sections.items()})
        return out

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.to_dict() == other.to_dict()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]  # (values hold dicts, as the dataclass's did)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.to_dict().items())})"


def core_keys() -> tuple[str, ...]:
    """The top-level keys every run has: flat parts' fields and nested parts' keys, in order."""
    return tuple(k for p in parts() for k in (fields(p.cls) if p.flat else (p.key,)))


def build(settings: type[Settings], values: Mapping[str, Any], schema: Any) -> Any:
    """`settings` (a Settings class) of a nested mapping: the schema's defaults, the values over them."""
    values = merge(dict(schema.defaults), values)
    by_part: dict[str, dict] = {p.key: {} for p in parts()}
    owner = {k: p for p in parts() for k in (fields(p.cls) if p.flat else (p.key,))}
    sections: dict[str, Any] = {}
    for key, value in values.items():
        if key in schema.sections:
            if not isinstance(value, Mapping):
                raise ConfigError(key, f"is a section: give {key}.<field>=value (fields: {', '.join(fields(schema.sections[key]))})")  # fmt: skip
            sections[key] = value
        elif key in owner:
            part = owner[key]
            if part.flat:
                by_part[part.key][key] = value
            elif isinstance(value, str) and value in part.shorthand:
                by_part[part.key] = dict(part.shorthand[value])
            elif not isinstance(value, Mapping):
                raise ConfigError(key, f"expected a mapping of {', '.join(fields(part.cls))}")
            else:
                by_part[part.key] = dict(value)
        else:
            raise misplaced(key, schema.name, schema.sections)
    built = {p.key: build_part(p.cls, by_part[p.key], "" if p.flat else f"{p.key}.") for p in parts()}
    return settings(built, {n: build_part(c, sections.get(n, {}), f"{n}.") for n, c in schema.sections.items()})


def build_part(cls, values: Mapping[str, Any], prefix: str = ""):
    """An instance of part or section class `cls` from a mapping."""
    known, hints, kwargs = fields(cls), typing.get_type_hints(cls), {}
    for key, value in values.items():
        if key not in known:
            raise unknown_key(f"{prefix}{key}", [f"{prefix}{k}" for k in known])
        if isinstance(value, bool) and {"on", "off"} & set(known[key].metadata.get("choices", ())):
            value = "on" if value else "off"  # YAML 1.1 reads a bare off/on as a boolean: `async.balance=off`
        kwargs[key] = coerce(f"{prefix}{key}", value, hints[key])
    return cls(**kwargs)


# ----------------------------------------------------------------------------- walking


def walk(cls, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field]]:
    """(dotted key, field) of every leaf field of a part or section class."""
    for f in dataclasses.fields(cls):
        yield f"{prefix}{f.name}", f


def core_walk() -> Iterator[tuple[str, dataclasses.Field]]:
    for p in parts():
        yield from walk(p.cls, "" if p.flat else f"{p.key}.")


def config_walk(config: Settings) -> Iterator[tuple[str, dataclasses.Field]]:
    yield from core_walk()
    for name, section in config.sections.items():
        yield from walk(type(section), f"{name}.")


def traced_keys(config: Settings) -> tuple[str, ...]:
    """Dotted keys of the traced hyperparameters of this config (core, then its sections)."""
    return tuple(key for key, f in config_walk(config) if f.metadata.get("traced"))


def resumable_keys(config: Settings) -> frozenset[str]:
    """Dotted keys that may change when this run is resumed."""
    return frozenset(key for key, f in config_walk(config) if f.metadata.get("resumable"))


def hparams_values(config: Settings) -> dict[str, float]:
    """The traced hyperparameters' values, by dotted key."""
    return {key: float(config.value(key)) for key in traced_keys(config)}


def _mappings(kind: str | None = None) -> set[str]:
    """Top-level keys of free-form mapping fields (of one merge kind, or any)."""
    return {k for p in parts() if p.flat for k, f in fields(p.cls).items()
            if f.metadata.get("mapping") and kind in (None, f.metadata["mapping"])}  # fmt: skip


def to_flat(tree: Mapping, prefix: str = "") -> dict[str, Any]:
    """{"mesh": {"data": 2}} -> {"mesh.data": 2}; free-form mappings (env_kwargs) stay one value."""
    out, whole = {}, _mappings()
    for k, v in tree.items():
        if isinstance(v, Mapping) and k not in whole:
            out.update(to_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def merge(base: dict, over: Mapping) -> dict:
    out, shallow = dict(base), _mappings("shallow")
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):  # a deep mapping merges per key
            out[k] = {**out[k], **v} if k in shallow else merge(out[k], v)
        else:
            out[k] = v
    return out


# ----------------------------------------------------------------------------- reading


def listed(items: typing.Iterable[Any], first: int = 8) -> str:
    """The first few items, comma-separated, and how many more (a message stays one short line
    however many keys a file holds)."""
    items = [str(x) for x in items]
    more = f" and {len(items) - first} more" if len(items) > first else ""
    return ", ".join(items[:first]) + more


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (at most 300 characters), or its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def unknown_key(key: str, allowed: typing.Iterable[str], prefix: str = "") -> ConfigError:
    """ConfigError for field `prefix + key`, with the closest allowed key as a hint."""
    allowed = sorted(allowed)
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ConfigError(f"{prefix}{key}", f"unknown key{hint}; allowed keys: {', '.join(allowed)}")


def homes(key: str) -> list[tuple[str, str, list[str]]]:
    """Where a top-level key that is not core lives: (section, dotted key, algorithms taking it)."""
    found: dict[str, tuple[str, list[str]]] = {}
    for schema in _SCHEMAS.values():
        for name, cls in schema.sections.items():
            if key == name:  # a whole section
                found.setdefault(name, (name, []))[1].append(schema.name)
            for field in fields(cls):
                if field == key or f"{name}.{field}" in RENAMED.get(key, ()):
                    found.setdefault(f"{name}.{field}", (name, []))[1].append(schema.name)
    return [(section, dotted, algos) for dotted, (section, algos) in found.items()]


def misplaced(key: str, algo: str, sections: Mapping[str, type]) -> ConfigError:
    """The error for a top-level key that is neither core nor one of algo's sections."""
    found = homes(key)
    mine = [dotted for section, dotted, _ in found if section in sections]
    if mine:
        return ConfigError(key, f"is a key of a section now: write {mine[0]}")
    if found:
        where = "; ".join(f"{'the section' if dotted == section else dotted} of algo={', '.join(algos)}"
                          for section, dotted, algos in found)  # fmt: skip
        takes = ", ".join(f"{s}.*" for s in sections) or "no section"
        return ConfigError(key, f"is {where}; algo={algo} takes {takes}")
    return unknown_key(key, list(core_keys()) + [f"{s}.{f}" for s, cls in sections.items() for f in fields(cls)])


def read_yaml_mapping(path: str | Path, field: str, expected: str) -> dict:
    """The mapping in YAML file `path`; ConfigError(field) when the file is missing or holds
    something else (`expected` says what it should hold)."""
    path = Path(path)
    if not path.is_file():
        if path.is_dir():
            raise ConfigError(field, f"{path} is a directory, not a YAML file; give the file in it")
        if path.exists():  # a FIFO, socket or device: reading it could block or never end
            raise ConfigError(field, f"{path} is not a regular file (a FIFO, socket or device); give a YAML file")
        raise ConfigError(field, f"file not found: {path}")
    try:
        loaded = yaml.load(path.read_text(encoding="utf-8"), Loader=_StrictLoader) or {}
    except UnicodeDecodeError as exc:
        raise ConfigError(field, f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(field, f"{path} is not valid YAML{line}: {problem}") from None
    except OSError as exc:
        raise ConfigError(field, f"{path} cannot be read ({exc.strerror})") from None
    if not isinstance(loaded, dict):
        raise ConfigError(field, f"{path} must hold {expected}")
    return loaded


class _StrictLoader(yaml.SafeLoader):
    """yaml.safe_load's loader (no Python objects), refusing a key given twice in one mapping
    (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} appears twice in one mapping", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def coerce(name: str, value: Any, annotation: Any) -> Any:
    """Convert a parsed YAML/CLI value to the field's declared type, or raise ConfigError."""
    kind = {"int": int, "float": float, "bool": bool, "str": str, "dict": dict}.get(
        annotation if isinstance(annotation, str) else getattr(annotation, "__name__", ""),
    )
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(name, f"expected true or false, got {value!r}")
    if kind is int or kind is float:
        value = parse_scalar(value) if isinstance(value, str) else value
        if kind is int and isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and (kind is float or isinstance(value, int)):
            return kind(value)
        raise ConfigError(name, f"expected {'an integer' if kind is int else 'a number'}, got {value!r}")
    if kind is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        hint = " (YAML reads yes/no/on/off/true/false as booleans: quote the word)" if isinstance(value, bool) else ""
        raise ConfigError(name, f"expected a string, got {value!r}{hint}")
    if kind is dict:
        if isinstance(value, Mapping):
            return dict(value)
        raise ConfigError(name, f"expected a mapping, got {value!r}")
    return value


def parse_scalar(text: str) -> Any:
    """Parse a CLI value: numbers like 2e6 (which YAML reads as a string), else YAML."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return yaml.safe_load(text) if text != "" else ""


def set_dotted(tree: dict, dotted: str, value: Any) -> None:
    *heads, last = dotted.split(".")
    node = tree
    for part in heads:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(dotted, f"'{part}' is not a section")
        node = child
    node[last] = value


def parse_overrides(args: typing.Sequence[str]) -> dict:
    """`["lr=1e-3", "mesh.data=4"]` -> nested dict of parsed values."""
    tree: dict = {}
    for arg in args:
        if "=" not in arg:
            raise ConfigError(arg, "expected key=value (for example lr=3e-4 or mesh.data=4)")
        key, text = arg.split("=", 1)
        set_dotted(tree, key.strip(), parse_scalar(text.strip()))
    return tree


# ----------------------------------------------------------------------------- checking


def check_field(key: str, value: Any, meta: Mapping) -> None:
    """The constraints a field declares in its metadata."""
    if meta.get("choices"):
        one_of(key, value, meta["choices"])
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(key, f"must be a finite number, got {value}")
    low, above, high = meta.get("minimum"), meta.get("above"), meta.get("maximum")
    if low is not None and high is not None and not low <= value <= high:
        raise ConfigError(key, f"must lie in [{_num(low)}, {_num(high)}], got {value}")
    if low is not None and value < low:
        raise ConfigError(key, f"must be >= {_num(low)}, got {value}")
    if above is not None and not value > above:
        raise ConfigError(key, f"must be > {_num(above)}, got {value}")
    if high is not None and value > high:
        raise ConfigError(key, f"must be <= {_num(high)}, got {value}")


def check_fields(config: Settings) -> None:
    """Every field's own constraints, then each section's and part's `check(config)`, in order."""
    for key, f in config_walk(config):
        check_field(key, config.value(key), f.metadata)
    for value in list(config.sections.values()) + [config.part(p.key) for p in parts()]:
        if hasattr(value, "check"):
            value.check(config)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def one_of(name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(name, f"got {value!r}{hint}; allowed: {', '.join(str(a) for a in allowed)}")


def divisors(n: int) -> str:
    """Every divisor of n, for messages that list the allowed values."""
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def dump_yaml(config: Settings) -> str:
    return yaml.safe_dump(config.to_dict(), sort_keys=False)
