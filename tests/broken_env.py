"""Env factories that fail as a careless user's might: they raise (an Exception, their own
BaseException, SystemExit), take a minute, return None, end the process (os._exit) or crash it (for the JaxMARL path
`env=tests.broken_env:NAME` and the host path `env=pettingzoo:tests.broken_env:NAME`)."""


def explode(**kwargs):
    raise RuntimeError("factory exploded on purpose")


def nothing(**kwargs):
    return None


class OwnBaseException(BaseException):
    """A user's exception that derives from BaseException, not Exception."""


def base_exception(**kwargs):
    raise OwnBaseException("the factory raised its own BaseException")


def exits(**kwargs):
    raise SystemExit(3)


def sleeps(**kwargs):
    """A factory that takes a minute (a simulator starting up): says when it has begun, on stdout."""
    import time

    print("factory started", flush=True)
    time.sleep(60)


def spins(**kwargs):
    """A factory that never returns, busy in Python (a loop waiting for something that never comes)."""
    while True:
        pass


def naps(seconds: float = 3600.0, **kwargs):
    """A factory that blocks in a sleep (a simulator that never answers), or returns after `seconds`."""
    import time

    time.sleep(seconds)
    import jaxmarl

    return jaxmarl.make("MPE_simple_spread_v3")


def exits_now(**kwargs):
    """A factory that ends the process at once, skipping every handler (os._exit)."""
    import os

    os._exit(3)


def segfaults(**kwargs):
    """A factory whose native code crashes the interpreter (a segmentation fault)."""
    import ctypes

    ctypes.string_at(0)
