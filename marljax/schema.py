"""The settings engine; it knows no field. Layers declare their settings beside their code as
*parts* (frozen dataclasses of `setting(...)` fields) and register them (`register_part`): a flat
part's fields are top-level keys (`num_envs=`), a nested one's sit under its key (`mesh.seed=`),
laid out by `order`; an optional part is a section of the algorithms whose supports ask for it
(`async.*`). Algorithms register their sections, other projects' file formats their readers.
Values from YAML (a strict loader) and `key=value` overrides are coerced to the declared types and
checked against each field's metadata before anything compiles; every error names the field and
what is allowed. It imports no other marljax module; `marljax.config` assembles the run."""

from __future__ import annotations

import dataclasses
import difflib
import importlib
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
    """A config field with its help line and constraints. `minimum`/`maximum`: inclusive bounds;
    `above`: exclusive. `traced`: a float hyperparameter carried as a traced scalar (sweeps vmap it).
    `resumable`: may change on resume. `jaxmarl`: JaxMARL's UPPERCASE keys that mean it, in its units.
    `mapping`: a free-form mapping ("deep": merged per key; "shallow": each key's value replaced)."""
    meta = {
        "help": help,
        "choices": tuple(choices),
        "minimum": minimum,
        "above": above,
        "maximum": maximum,
        "traced": traced,
        "resumable": resumable,
        "mapping": mapping,
        "jaxmarl": (jaxmarl,) if isinstance(jaxmarl, str) else tuple(jaxmarl),
    }
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def fields(cls) -> dict[str, dataclasses.Field]:  # name -> field of a part or section class
    return {f.name: f for f in dataclasses.fields(cls)}


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
_SCHEMAS: dict[str, Any] = {}  # algorithm name -> its schema
# modules whose import registers algorithms (marljax/__init__.py names marljax.algos): imported at
# the first lookup, not with the package, so that the engine and the settings load without JAX
_PROVIDERS: list[str] = []


def register_part(part: Part) -> None:
    """Make a layer's settings part of every run's config (`when`: of the algorithms that support it)."""
    taken = {p.key for p in _PARTS.values() if p.key != part.key} | set(_owners(exclude=part.key))
    if clash := (set(fields(part.cls)) if part.flat else {part.key}) & taken:
        raise ValueError(f"{part.key}: keys already registered by another part: {sorted(clash)}")
    _PARTS[part.key] = part
    for schema in list(_SCHEMAS.values()):  # an optional part registered after an algorithm
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


def register_provider(module: str) -> None:
    """Name a module whose import registers algorithms; it is imported at the first lookup."""
    if module not in _PROVIDERS:
        _PROVIDERS.append(module)


def _schemas() -> dict[str, Any]:
    """Every registered schema, the providers imported first (a no-op once they are, or while
    one is being imported and looks a schema up)."""
    for module in _PROVIDERS:
        importlib.import_module(module)
    return _SCHEMAS


def algorithm_schema(name: str) -> Any:  # (marljax.config.AlgorithmSchema)
    schemas = _schemas()
    if name not in schemas:
        one_of("algo", name, tuple(schemas))
    return schemas[name]


def algorithms() -> tuple[str, ...]:
    """Every registered algorithm's name, in registration order."""
    return tuple(_schemas())


class FileFormat(typing.NamedTuple):
    """Another project's config files read into marljax's keys (JaxMARL's: marljax/jaxmarl_config.py,
    which sits above envs/ and so registers itself; the package's __init__ imports it)."""

    claims: Callable[[Mapping[str, Any]], bool]  # are these a file's values in this format?
    read: Callable[[Mapping[str, Any], Path, str | None], dict]  # (values, path, algo= override) -> marljax's mapping


FILE_FORMATS: list[FileFormat] = []


def register_file_format(file_format: FileFormat) -> None:
    if file_format not in FILE_FORMATS:
        FILE_FORMATS.append(file_format)


def _owners(exclude: str = "") -> dict[str, Part]:
    """Every top-level key (a flat part's field, a nested part's key) -> its part, in order."""
    return {k: p for p in parts() if p.key != exclude for k in (fields(p.cls) if p.flat else (p.key,))}


def core_keys() -> tuple[str, ...]:
    """The top-level keys every run has, in order."""
    return tuple(_owners())


def build(values: Mapping[str, Any], schema: Any, defaults: Mapping | None = None) -> tuple[dict, dict]:
    """(every part, the algorithm's sections) of a nested mapping: `defaults` (schema's), the values over them."""
    values = merge(dict(schema.defaults if defaults is None else defaults), values)
    by_part: dict[str, dict] = {p.key: {} for p in parts()}
    owner = _owners()
    sections: dict[str, Any] = {}
    for key, value in values.items():
        if key in schema.sections:
            if not isinstance(value, Mapping):
                raise ConfigError(
                    key, f"is a section: give {key}.<field>=value (fields: {', '.join(fields(schema.sections[key]))})"
                )
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
    return built, {n: build_part(c, sections.get(n, {}), f"{n}.") for n, c in schema.sections.items()}


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


def walk(cls, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field]]:  # (dotted key, field)
    return ((f"{prefix}{f.name}", f) for f in dataclasses.fields(cls))


def config_walk(config: Any = None) -> Iterator[tuple[str, dataclasses.Field]]:
    """(dotted key, field) of every part's fields, then (given a config) of its sections'."""
    for p in parts():
        yield from walk(p.cls, "" if p.flat else f"{p.key}.")
    for name, section in (config.sections if config is not None else {}).items():
        yield from walk(type(section), f"{name}.")


def traced_keys(config: Any) -> tuple[str, ...]:
    """Dotted keys of the traced hyperparameters of this config (core, then its sections)."""
    return tuple(key for key, f in config_walk(config) if f.metadata.get("traced"))


def resumable_keys(config: Any) -> frozenset[str]:
    """Dotted keys that may change when this run is resumed."""
    return frozenset(key for key, f in config_walk(config) if f.metadata.get("resumable"))


def _mappings(kind: str | None = None) -> set[str]:
    """Top-level keys of free-form mapping fields (of one merge kind, or any)."""
    return {
        k
        for p in parts()
        if p.flat
        for k, f in fields(p.cls).items()
        if f.metadata.get("mapping") and kind in (None, f.metadata["mapping"])
    }


def to_flat(tree: Mapping, prefix: str = "") -> dict[str, Any]:
    """{"mesh": {"data": 2}} -> {"mesh.data": 2}; free-form mappings (env_kwargs) stay one value."""
    out, whole = {}, _mappings()
    for k, v in tree.items():
        out.update(to_flat(v, f"{prefix}{k}.") if isinstance(v, Mapping) and k not in whole else {f"{prefix}{k}": v})
    return out


def merge(base: dict, over: Mapping) -> dict:
    out, shallow = dict(base), _mappings("shallow")
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):  # a deep mapping merges per key
            out[k] = {**out[k], **v} if k in shallow else merge(out[k], v)
        else:
            out[k] = v
    return out


def unknown_key(key: str, allowed: typing.Iterable[str], prefix: str = "") -> ConfigError:
    """ConfigError for field `prefix + key`, with the closest allowed key as a hint."""
    allowed = sorted(allowed)
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ConfigError(f"{prefix}{key}", f"unknown key{hint}; allowed keys: {', '.join(allowed)}")


def homes(key: str) -> list[tuple[str, str, list[str]]]:
    """Where a top-level key that is not core lives: (section, dotted key, algorithms taking it)."""
    found: dict[str, tuple[str, list[str]]] = {}
    for schema in _schemas().values():
        for name, cls in schema.sections.items():
            if key == name:  # a whole section
                found.setdefault(name, (name, []))[1].append(schema.name)
            for field in fields(cls):
                if field == key:
                    found.setdefault(f"{name}.{field}", (name, []))[1].append(schema.name)
    return [(section, dotted, algos) for dotted, (section, algos) in found.items()]


def misplaced(key: str, algo: str, sections: Mapping[str, type]) -> ConfigError:
    """The error for a top-level key that is neither core nor one of algo's sections."""
    found = homes(key)
    mine = [dotted for section, dotted, _ in found if section in sections]
    if mine:
        return ConfigError(key, f"is a key of a section now: write {mine[0]}")
    if found:
        where = "; ".join(
            f"{'the section' if dotted == section else dotted} of algo={', '.join(algos)}"
            for section, dotted, algos in found
        )
        takes = ", ".join(f"{s}.*" for s in sections) or "no section"
        return ConfigError(key, f"is {where}; algo={algo} takes {takes}")
    return unknown_key(key, list(core_keys()) + [f"{s}.{f}" for s, cls in sections.items() for f in fields(cls)])


def read_yaml_mapping(path: str | Path, field: str, expected: str) -> dict:
    """The mapping in YAML file `path`; ConfigError(field) when the file is missing or holds
    something else (`expected` says what it should hold)."""
    path = Path(path)
    try:
        path.stat()
    except FileNotFoundError:
        pass  # said below
    except OSError as exc:  # a name over 255 bytes, a loop of symlinks, a directory it may not enter
        shown = str(path) if len(str(path)) <= 80 else f"{str(path)[:60]}...{str(path)[-12:]}"
        raise ConfigError(field, f"{shown} cannot be read: {exc.strerror}") from None
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
        raise ConfigError(field, f"{path} is not valid YAML{line}: {_yaml_problem(exc)}") from None
    except OSError as exc:
        raise ConfigError(field, f"{path} cannot be read ({exc.strerror})") from None
    except RecursionError:  # PyYAML composes nested nodes recursively
        raise ConfigError(field, f"{path} is nested too deep to be a config file (hundreds of levels)") from None
    if not isinstance(loaded, dict):
        raise ConfigError(field, f"{path} must hold {expected}")
    return loaded


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """What PyYAML found wrong, in a few words (its first line where it names no problem)."""
    return getattr(exc, "problem", None) or str(exc).splitlines()[0]


class _StrictLoader(yaml.SafeLoader):
    """yaml.safe_load's loader (no Python objects), refusing a key given twice in one mapping
    (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (list, dict, set)):  # `[a, b]: 1` or `? {a: 1}`: no setting is named so
                raise yaml.constructor.ConstructorError(
                    None, None, f"a key must be a name or a number, got a {type(key).__name__}", key_node.start_mark
                )
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
        if isinstance(value, bool) or (
            isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no")
        ):
            return value if isinstance(value, bool) else value.lower() in ("true", "1", "yes")
        raise ConfigError(name, f"expected true or false, got {value!r}")
    if kind is int or kind is float:
        value = parse_scalar(value, name) if isinstance(value, str) else value
        if kind is int and isinstance(value, float) and value.is_integer():
            return int(value)
        if (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and (kind is float or isinstance(value, int))
        ):
            return kind(value)
        raise ConfigError(name, f"expected {'an integer' if kind is int else 'a number'}, got {value!r}")
    if kind is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        hint = " (YAML reads yes/no/on/off/true/false as booleans: quote the word)" if isinstance(value, bool) else ""
        raise ConfigError(name, f"expected a string, got {value!r}{hint}")
    if kind is dict and not isinstance(value, Mapping):
        raise ConfigError(name, f"expected a mapping, got {value!r}")
    return dict(value) if kind is dict else value


def parse_scalar(text: str, field: str = "value") -> Any:
    """Parse a CLI value: numbers like 2e6 (which YAML reads as a string), else YAML; text YAML cannot
    read is ConfigError(field), naming the problem."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    try:
        return yaml.safe_load(text) if text != "" else ""
    except RecursionError:
        raise ConfigError(field, f"a value nested {text[:20]!r}... too deep to be a setting") from None
    except yaml.YAMLError as exc:
        # the usual cause: a value with spaces given unquoted, which the shell splits into several arguments
        raise ConfigError(
            field,
            f"{text!r} is not a value YAML can read ({_yaml_problem(exc)}); on the command "
            "line a value with spaces must be one shell argument: quote the whole key=value",
        ) from None


def set_dotted(tree: dict, dotted: str, value: Any) -> None:
    *heads, last = dotted.split(".")
    node = tree
    for part in heads:
        if not isinstance(node := node.setdefault(part, {}), dict):
            raise ConfigError(dotted, f"'{part}' is not a section")
    node[last] = value


def parse_overrides(args: typing.Sequence[str]) -> dict:
    """`["lr=1e-3", "mesh.data=4"]` -> nested dict of parsed values."""
    tree: dict = {}
    for arg in args:
        if "=" not in arg:
            raise ConfigError(arg, "expected key=value (for example lr=3e-4 or mesh.data=4)")
        key, text = arg.split("=", 1)
        set_dotted(tree, key.strip(), parse_scalar(text.strip(), key.strip()))
    return tree


INT32_MAX = 2**31 - 1  # the widest integer setting without a declared maximum


def shown(value: Any) -> str:
    """A number for a message: a huge integer as 1e+300 (or its digit count), not 300 digits."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        try:
            return f"{float(value):.3g}"
        except OverflowError:
            return f"an integer of {len(str(abs(value)))} digits"
    return repr(value)


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


def check_field(key: str, value: Any, meta: Mapping) -> None:
    """The constraints a field declares in its metadata."""
    if meta.get("choices"):
        one_of(key, value, meta["choices"])
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(key, f"must be a finite number, got {value}")
    low, above, high = meta.get("minimum"), meta.get("above"), meta.get("maximum")
    if isinstance(value, int) and high is None and abs(value) > INT32_MAX:
        # a count or a size past int32 is no setting a run can use: said here rather than as an
        # OverflowError, or under another field whose check multiplies it (num_envs=1e30)
        bound = f"<= {INT32_MAX:,}" if value > 0 else f">= {-INT32_MAX:,}"
        raise ConfigError(key, f"must be {bound}, got {shown(value)}")
    _num = lambda x: str(int(x)) if float(x).is_integer() else str(x)  # noqa: E731  (one-line helper)
    if low is not None and high is not None and not low <= value <= high:
        raise ConfigError(key, f"must lie in [{_num(low)}, {_num(high)}], got {shown(value)}")
    if low is not None and value < low:
        raise ConfigError(key, f"must be >= {_num(low)}, got {value}")
    if above is not None and not value > above:
        raise ConfigError(key, f"must be > {_num(above)}, got {value}")
    if high is not None and value > high:
        raise ConfigError(key, f"must be <= {_num(high)}, got {value}")


def check_fields(config: Any) -> None:
    """Every field's own constraints, then each section's and part's `check(config)`, in order."""
    for key, f in config_walk(config):
        check_field(key, config.value(key), f.metadata)
    for value in list(config.sections.values()) + [config.part(p.key) for p in parts()]:
        getattr(value, "check", lambda config: None)(config)


def one_of(name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(name, f"got {value!r}{hint}; allowed: {', '.join(str(a) for a in allowed)}")


def divisors(n: int) -> str:
    """Every divisor of n, for messages that list the allowed values."""
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def dump_yaml(config: Any) -> str:
    return yaml.safe_dump(config.to_dict(), sort_keys=False)
