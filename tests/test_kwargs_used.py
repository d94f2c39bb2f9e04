"""accepted_kwargs reads which keys a constructor uses, and says "cannot tell" when it can't."""

from marljax.envs.kwargs_used import accepted_kwargs


class Base:
    def __init__(self, n: int = 3, **kwargs):
        self.n = n
        if "rad" in kwargs:
            self.rad = kwargs["rad"]
        self.mass = kwargs.get("mass", 1.0)


class Child(Base):
    def __init__(self, width: int = 2, **kwargs):
        super().__init__(n=width + 1, **kwargs)


class Elsewhere:
    def __init__(self, **kwargs):
        self.inner = Base(**kwargs)  # handed to another object: cannot tell


class Iterates:
    def __init__(self, **kwargs):
        for k, v in kwargs.items():  # any key may matter
            setattr(self, k, v)


class Plain:
    def __init__(self, a, b=1):
        pass


def test_named_parameters_literal_reads_and_super_chain():
    assert accepted_kwargs(Base) == {"n", "rad", "mass"}
    assert accepted_kwargs(Child) == {"width", "n", "rad", "mass"}
    assert accepted_kwargs(Plain) == {"a", "b"}


def test_unknown_uses_of_the_kwargs_dict_give_no_answer():
    assert accepted_kwargs(Elsewhere) is None
    assert accepted_kwargs(Iterates) is None


def test_the_source_is_parsed_with_the_cyclic_collector_off_and_it_is_back_on_after(monkeypatch):
    # CPython 3.11's parser keeps one depth count per interpreter; a finalizer run by the collector
    # mid-parse that parses too (asyncio's "never retrieved" log formats a traceback) breaks it (CI, stop 71)
    import ast
    import gc

    seen = []
    real = ast.parse
    monkeypatch.setattr(ast, "parse", lambda *a, **k: (seen.append(gc.isenabled()), real(*a, **k))[1])
    assert gc.isenabled()
    assert accepted_kwargs(Child) == {"width", "n", "rad", "mass"}
    assert seen == [False, False] and gc.isenabled()
