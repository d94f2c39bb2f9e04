"""Env factories that fail as a careless user's might: one raises, one returns None (for the
JaxMARL path `env=tests.broken_env:NAME` and the host path `env=pettingzoo:tests.broken_env:NAME`)."""


def explode(**kwargs):
    raise RuntimeError("factory exploded on purpose")


def nothing(**kwargs):
    return None
