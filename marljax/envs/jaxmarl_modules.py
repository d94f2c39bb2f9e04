"""JaxMARL's env ids and the one module each comes from, imported without the rest of JaxMARL.

`import jaxmarl` runs its package `__init__`, which imports every env module: 2.6-3.5 s of a run's
start-up on a 2-core CPU (STORM's module alone 1.5 s), for the one env a run uses. A run builds the
ids listed in `CLASSES` from their own module (0.17 s for MPE spread); the rest (MABrax, the
JaxRobotarium ids) go through `jaxmarl.make` as before. Classes are the same objects either way:
a later `import jaxmarl` reuses the modules already loaded.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import os
import sys
import types

# jaxmarl 0.2.0's `registered_envs`, in its order (tests/test_jaxmarl_modules.py holds them equal)
JAXMARL_IDS = (
    "MPE_simple_v3",
    "MPE_simple_tag_v3",
    "MPE_simple_world_comm_v3",
    "MPE_simple_spread_v3",
    "MPE_simple_crypto_v3",
    "MPE_simple_speaker_listener_v4",
    "MPE_simple_push_v3",
    "MPE_simple_adversary_v3",
    "MPE_simple_reference_v3",
    "MPE_simple_facmac_v1",
    "MPE_simple_facmac_3a_v1",
    "MPE_simple_facmac_6a_v1",
    "MPE_simple_facmac_9a_v1",
    "switch_riddle",
    "SMAX",
    "HeuristicEnemySMAX",
    "LearnedPolicyEnemySMAX",
    "ant_4x2",
    "halfcheetah_6x1",
    "hopper_3x1",
    "humanoid_9|8",
    "walker2d_2x3",
    "storm",
    "storm_2p",
    "storm_np",
    "hanabi",
    "overcooked",
    "overcooked_v2",
    "coin_game",
    "jaxnav",
    "JaxRobotarium_navigation",
    "JaxRobotarium_discovery",
    "JaxRobotarium_material_transport",
    "JaxRobotarium_warehouse",
    "JaxRobotarium_arctic_transport",
    "JaxRobotarium_foraging",
    "JaxRobotarium_rware",
    "JaxRobotarium_predator_prey",
)

_MPE = "jaxmarl.environments.mpe."
_SMAX = "jaxmarl.environments.smax."
# id -> (module, the callable in it) that `jaxmarl.make(id, **kwargs)` calls as `callable(**kwargs)`
CLASSES: dict[str, tuple[str, str]] = {
    "MPE_simple_v3": (_MPE + "simple", "SimpleMPE"),
    "MPE_simple_tag_v3": (_MPE + "simple_tag", "SimpleTagMPE"),
    "MPE_simple_world_comm_v3": (_MPE + "simple_world_comm", "SimpleWorldCommMPE"),
    "MPE_simple_spread_v3": (_MPE + "simple_spread", "SimpleSpreadMPE"),
    "MPE_simple_crypto_v3": (_MPE + "simple_crypto", "SimpleCryptoMPE"),
    "MPE_simple_speaker_listener_v4": (_MPE + "simple_speaker_listener", "SimpleSpeakerListenerMPE"),
    "MPE_simple_push_v3": (_MPE + "simple_push", "SimplePushMPE"),
    "MPE_simple_adversary_v3": (_MPE + "simple_adversary", "SimpleAdversaryMPE"),
    "MPE_simple_reference_v3": (_MPE + "simple_reference", "SimpleReferenceMPE"),
    "MPE_simple_facmac_v1": (_MPE + "simple_facmac", "SimpleFacmacMPE"),
    "MPE_simple_facmac_3a_v1": (_MPE + "simple_facmac", "SimpleFacmacMPE3a"),
    "MPE_simple_facmac_6a_v1": (_MPE + "simple_facmac", "SimpleFacmacMPE6a"),
    "MPE_simple_facmac_9a_v1": (_MPE + "simple_facmac", "SimpleFacmacMPE9a"),
    "switch_riddle": ("jaxmarl.environments.switch_riddle.switch_riddle", "SwitchRiddle"),
    "SMAX": (_SMAX + "smax_env", "SMAX"),
    "HeuristicEnemySMAX": (_SMAX + "heuristic_enemy_smax_env", "HeuristicEnemySMAX"),
    "LearnedPolicyEnemySMAX": (_SMAX + "heuristic_enemy_smax_env", "LearnedPolicyEnemySMAX"),
    "storm": ("jaxmarl.environments.storm.storm_env", "InTheGrid"),
    "storm_2p": ("jaxmarl.environments.storm.storm_2p", "InTheGrid_2p"),
    "storm_np": ("jaxmarl.environments.storm.storm", "InTheMatrix"),
    "hanabi": ("jaxmarl.environments.hanabi.hanabi", "HanabiEnv"),
    "overcooked": ("jaxmarl.environments.overcooked.overcooked", "Overcooked"),
    "overcooked_v2": ("jaxmarl.environments.overcooked_v2.overcooked", "OvercookedV2"),
    "coin_game": ("jaxmarl.environments.coin_game.coin_game", "CoinGame"),
    "jaxnav": ("jaxmarl.environments.jaxnav.jaxnav_env", "JaxNav"),
}


# What jaxmarl 0.2.0 prints on import about its optional JaxRobotarium envs: noise to a user who
# never asked for them (an id that needs them is refused in one line of our own, `check_env_name`).
JAXMARL_BANNER = frozenset(
    {
        "Importing submoduled environments...",
        "Submoduled environments not found. Skipping import.",
        "Submoduled environments imported successfully.",
    }
)


def import_all() -> None:
    """Import the whole of jaxmarl without its import banner (JAXMARL_BANNER; any other line it prints
    is passed on) and without losing sys.stdout and sys.stderr: its MABrax module resets them to
    sys.__stdout__ / sys.__stderr__ after trying to import brax, which silenced every later print
    of a notebook (or any redirected output) once the first env was made."""
    if "jaxmarl.registration" in sys.modules:
        return
    saved = sys.stdout, sys.stderr, sys.__stdout__
    caught = io.StringIO()
    try:
        # the MABrax module sets sys.stdout back to sys.__stdout__: both point at the catcher meanwhile
        sys.stdout = caught
        setattr(sys, "__stdout__", caught)  # noqa: B010 - a Final name to type checkers, plain to Python
        import jaxmarl.registration  # noqa: F401
    finally:
        sys.stdout, sys.stderr = saved[:2]
        setattr(sys, "__stdout__", saved[2])  # noqa: B010
        kept = [line for line in caught.getvalue().splitlines(keepends=True) if line.strip() not in JAXMARL_BANNER]
        if kept:
            sys.stdout.write("".join(kept))


def import_module(name: str) -> types.ModuleType:
    """`jaxmarl.<...>` module `name`, importing only it and what it imports: the packages above it
    stand in as empty ones while it loads (their `__init__`s import every env) and are dropped after,
    so a later `import jaxmarl` runs them in full. Once JaxMARL is imported, a plain import."""
    parts = name.split(".")
    if parts[0] in sys.modules:
        return importlib.import_module(name)
    spec = importlib.util.find_spec(parts[0])
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"No module named {parts[0]!r}", name=parts[0])
    root = os.path.dirname(spec.origin)
    standing_in = []
    for depth in range(1, len(parts)):
        package = ".".join(parts[:depth])
        if package in sys.modules:
            continue
        stand_in = types.ModuleType(package)
        stand_in.__path__ = [os.path.join(root, *parts[1:depth])]
        stand_in.__package__ = package
        sys.modules[package] = stand_in
        standing_in.append(package)
    try:
        return importlib.import_module(name)
    except ImportError:  # a module that needs a name of a package's __init__: import JaxMARL whole
        pass
    finally:
        for package in standing_in:
            if sys.modules.get(package) is not None and not hasattr(sys.modules[package], "__file__"):
                del sys.modules[package]
    import_all()
    return importlib.import_module(name)


def env_class(env_id: str):
    """The callable `jaxmarl.make(env_id, ...)` calls, from its own module; None for an id JaxMARL
    builds another way (MABrax, JaxRobotarium)."""
    if env_id not in CLASSES:
        return None
    module, attr = CLASSES[env_id]
    return getattr(import_module(module), attr)
