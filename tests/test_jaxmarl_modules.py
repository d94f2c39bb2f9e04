"""A run imports only its env's module of JaxMARL, and builds the env jaxmarl.make would."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from marljax.envs.jaxmarl_modules import CLASSES, JAXMARL_IDS, env_class
from marljax.envs.registry import make_env


def test_the_ids_are_jaxmarls():
    from jaxmarl.registration import registered_envs

    assert JAXMARL_IDS == tuple(registered_envs)
    assert set(CLASSES) <= set(JAXMARL_IDS)


@pytest.mark.parametrize("env_id", sorted(set(CLASSES) - {"LearnedPolicyEnemySMAX"}))
def test_each_id_builds_what_jaxmarl_make_builds(env_id):
    import jaxmarl

    ours, theirs = make_env(env_id), jaxmarl.make(env_id)
    assert type(ours) is type(theirs)
    assert ours.agents == theirs.agents
    shapes = [(_shapes(ours.observation_space(a)), _shapes(theirs.observation_space(a))) for a in ours.agents]
    assert all(a == b for a, b in shapes), shapes


def _shapes(space):
    """A space's shape, or its parts' (STORM's observation is a dict of spaces)."""
    return {k: _shapes(v) for k, v in space.items()} if isinstance(space, dict) else space.shape


def test_the_smax_policy_enemy_is_jaxmarls_class():
    from jaxmarl import registration

    assert env_class("LearnedPolicyEnemySMAX") is registration.LearnedPolicyEnemySMAX
    assert env_class("ant_4x2") is None  # MABrax: jaxmarl.make's own branch


def test_a_run_imports_one_env_module_and_jaxmarl_whole_still_works_after():
    """In a fresh process: building spread leaves STORM, SMAX and JaxMARL's registry unimported (their
    import is most of `import jaxmarl`'s 2.6-3.5 s); every listed id's module loads the same way, none
    falling back to the whole package; then `import jaxmarl` works and its classes are the same objects."""
    code = textwrap.dedent(
        """
        import sys
        from marljax.envs.jaxmarl_modules import CLASSES, env_class
        from marljax.envs.registry import make_env

        env = make_env("MPE_simple_spread_v3")
        loaded = sorted(m for m in sys.modules if m.startswith("jaxmarl"))
        assert "jaxmarl.registration" not in loaded and not any("storm" in m or "smax" in m for m in loaded), loaded
        assert "jaxmarl" not in sys.modules and "jaxmarl.environments" not in sys.modules
        found = {env_id: env_class(env_id) for env_id in CLASSES}
        assert "jaxmarl.registration" not in sys.modules, "an id's module fell back to importing jaxmarl whole"
        from marljax.envs.jaxmarl_modules import import_all

        import_all()  # JaxMARL whole, its banner held back
        import jaxmarl
        from jaxmarl import registration

        assert type(jaxmarl.make("MPE_simple_spread_v3")) is type(env)
        assert found["SMAX"] is registration.SMAX and found["storm"] is registration.InTheGrid
        assert found["hanabi"] is registration.Hanabi
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines() == ["ok"], out.stdout  # and no banner of JaxMARL's
