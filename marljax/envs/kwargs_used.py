"""Which keyword arguments an environment's constructor actually uses, read from its source.

Many JaxMARL environments take `**kwargs` and look up only some keys in it (MPE's `SimpleMPE`
reads `rad`, `mass`, `max_speed`, ... with `if "rad" in kwargs`), so a misspelt
`env_kwargs.num_agent=4` would be accepted and silently ignored. `accepted_kwargs(cls)` walks the
class's `__init__`s along the MRO: named parameters count, a `**kwargs` contributes the literal
keys its body reads (`kwargs["k"]`, `kwargs.get("k")`, `"k" in kwargs`), and
`super().__init__(..., **kwargs)` hands the rest to the next class. Where the dict goes anywhere
else (another object's constructor, a loop over its items) the answer is None, "cannot tell",
and nothing is refused.
"""

from __future__ import annotations

import ast
import gc
import inspect
import textwrap


def _is_super_init(func: ast.expr) -> bool:
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "__init__"
        and isinstance(func.value, ast.Call)
        and isinstance(func.value.func, ast.Name)
        and func.value.func.id == "super"
    )


def _uses(tree: ast.AST, kw: str) -> tuple[set[str], bool, bool] | None:
    """(literal keys read from `kw`, passed on to super().__init__, used otherwise)."""
    keys: set[str] = set()
    handled: set[int] = set()  # ids of Name nodes whose use is understood
    to_super = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for k in node.keywords:
                if k.arg is None and isinstance(k.value, ast.Name) and k.value.id == kw:
                    if not _is_super_init(node.func):
                        return None  # handed to some other callable
                    to_super = True
                    handled.add(id(k.value))
            f = node.func
            if (
                isinstance(f, ast.Attribute)
                and f.attr in ("get", "pop")
                and isinstance(f.value, ast.Name)
                and f.value.id == kw
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                keys.add(str(node.args[0].value))
                handled.add(id(f.value))
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == kw:
            if isinstance(node.slice, ast.Constant):
                keys.add(str(node.slice.value))
                handled.add(id(node.value))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In):
            right = node.comparators[0]
            if isinstance(right, ast.Name) and right.id == kw and isinstance(node.left, ast.Constant):
                keys.add(str(node.left.value))
                handled.add(id(right))
    other = any(isinstance(n, ast.Name) and n.id == kw and id(n) not in handled for n in ast.walk(tree))
    return keys, to_super, other


def parse_source(source: str, filename: str = "<unknown>") -> ast.Module:
    """ast.parse with the cyclic collector held off: on CPython 3.11 a finalizer it runs mid-parse
    (asyncio's "exception never retrieved" log formats a traceback, which parses) corrupts the
    parser's shared depth count and raises SystemError (CPython gh-106905; seen in CI)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source, filename)
    finally:
        if was_on:
            gc.enable()


def accepted_kwargs(cls: type) -> set[str] | None:
    """Keyword names cls(...) uses, or None when its source does not say."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        if not inspect.isfunction(init):  # object.__init__ and other C code: the chain ends here
            return names
        params = inspect.signature(init).parameters.values()
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self"}
        kw = next((p.name for p in params if p.kind == p.VAR_KEYWORD), None)
        if kw is None:
            return names
        try:
            fn = parse_source(textwrap.dedent(inspect.getsource(init))).body[0]
        except (OSError, TypeError, SyntaxError, IndexError):
            return None
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        used = _uses(ast.Module(body=fn.body, type_ignores=[]), kw)
        if used is None or used[2]:
            return None
        keys, to_super, _ = used
        names |= keys
        if not to_super:
            return names
    return names
