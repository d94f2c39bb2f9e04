"""EnvAdapter over every JaxMARL env family, and the registry's error messages."""

from __future__ import annotations

import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marljax.config import ConfigError
from marljax.envs.adapter import EnvAdapter
from marljax.envs.registry import check_env_name, make_env

# name, env_kwargs, expected groups: (agents, obs_shape, discrete, action_dim, has_mask)
# The obs shapes are each agent's true observation (dict observations raveled), never padded.
CASES = {
    "MPE_simple_spread_v3": ({}, [(("agent_0", "agent_1", "agent_2"), (18,), True, 5, False)]),
    "MPE_simple_speaker_listener_v4": (
        {},
        [(("speaker_0",), (3,), True, 3, False), (("listener_0",), (11,), True, 5, False)],
    ),
    "MPE_simple_world_comm_v3": (
        {},
        [
            (("leadadversary_0",), (34,), False, 9, False),
            (("adversary_0", "adversary_1", "adversary_2"), (34,), False, 5, False),
            (("agent_0", "agent_1"), (28,), False, 5, False),
        ],
    ),
    "switch_riddle": ({}, [(("agent_0", "agent_1", "agent_2"), (2,), True, 3, False)]),
    "HeuristicEnemySMAX": ({"scenario": "3m"}, [(("ally_0", "ally_1", "ally_2"), (75,), True, 8, True)]),
    "hanabi": ({}, [(("agent_0", "agent_1"), (658,), True, 21, True)]),
    "overcooked": ({}, [(("agent_0", "agent_1"), (4, 5, 26), True, 6, False)]),
    "overcooked_v2": ({}, [(("agent_0", "agent_1"), (4, 5, 30), True, 6, False)]),
    "coin_game": ({}, [(("0", "1"), (36,), True, 5, False)]),
    # storm: {"observations": [N, 5, 5, 16], "inventory": [5, N]} -> 400 + 5 per agent
    "storm": ({}, [((0, 1), (5 * 5 * 16 + 5,), True, 5, False)]),
    # storm_2p: a tuple of {"observation": [5, 5, 10], "inventory": [6]} -> 250 + 6
    "storm_2p": ({}, [((0, 1), (5 * 5 * 10 + 6,), True, 5, False)]),
    # storm_np: one stacked array [N, 5, 5, 14]
    "storm_np": ({}, [((0, 1), (5, 5, 14), True, 8, False)]),
    "jaxnav": ({}, [(("agent_0", "agent_1"), (205,), False, 2, False)]),
}

E = 2  # environments per test


def _actions(adapter: EnvAdapter, masks: dict) -> dict:
    out = {}
    for g in adapter.groups:
        if g.discrete:
            # an available action per agent (first allowed one); all actions allowed w/o masks
            out[g.name] = jnp.argmax(masks[g.name], axis=-1).astype(jnp.int32)
        else:
            out[g.name] = jnp.zeros((E, g.size, g.action_dim), jnp.float32)
    return out


@pytest.mark.newest_jax  # each env's own code meets the newest jax too (CI leg 2)
@pytest.mark.parametrize("name", list(CASES))
def test_adapter_shapes(name):
    kwargs, expected = CASES[name]
    raw = make_env(name, kwargs)
    adapter = EnvAdapter(raw, name)

    # groups partition all agents exactly once, in a stable layout
    members = [a for g in adapter.groups for a in g.agents]
    assert sorted(map(str, members)) == sorted(map(str, raw.agents))
    assert len(members) == len(set(members)) == adapter.num_agents == len(raw.agents)
    assert sorted(i for g in adapter.groups for i in g.indices) == list(range(adapter.num_agents))
    for g in adapter.groups:
        assert [adapter.agents[i] for i in g.indices] == list(g.agents)
    assert len({g.name for g in adapter.groups}) == len(adapter.groups)

    got = [(tuple(g.agents), tuple(g.obs_shape), g.discrete, g.action_dim, g.has_mask) for g in adapter.groups]
    assert got == expected, adapter.describe()

    # no padding: where the env returns an agent-keyed dict of arrays, each member's obs
    # shape is exactly the group's
    raw_obs, _ = jax.eval_shape(raw.reset, jax.random.PRNGKey(0))
    if isinstance(raw_obs, dict) and all(a in raw_obs for a in raw.agents):
        for g in adapter.groups:
            for a in g.agents:
                leaves = jax.tree.leaves(raw_obs[a])
                true_shape = leaves[0].shape if len(leaves) == 1 else (sum(int(np.prod(x.shape)) for x in leaves),)
                assert tuple(true_shape) == g.obs_shape, (a, true_shape, g.obs_shape)

    def reset_and_step(key):
        # one compiled program: vmapped reset, masks, a step with valid actions, masks again
        k_reset, k_step = jax.random.split(key)
        obs, state = jax.vmap(adapter.reset)(jax.random.split(k_reset, E))
        masks = jax.vmap(adapter.action_mask)(state)
        actions = _actions(adapter, masks)
        res = jax.vmap(adapter.step)(jax.random.split(k_step, E), state, actions)
        env_masks = {}
        for attr in ("get_avail_actions", "get_legal_moves"):
            if any(g.has_mask for g in adapter.groups) and hasattr(raw, attr):
                try:
                    env_masks = jax.vmap(getattr(raw, attr))(state)
                    break
                except NotImplementedError:
                    continue
        return obs, masks, actions, res._replace(state=None), jax.vmap(adapter.action_mask)(res.state), env_masks

    obs, masks, actions, res, masks2, env_masks = jax.jit(reset_and_step)(jax.random.PRNGKey(0))
    for g in adapter.groups:
        if g.has_mask:
            # the env's own masks (SMAX: get_avail_actions, hanabi: get_legal_moves), per agent
            want = np.stack([np.asarray(env_masks[a]).astype(bool) for a in g.agents], axis=1)
            np.testing.assert_array_equal(np.asarray(masks[g.name]), want)
            assert not np.asarray(masks[g.name]).all()  # something is unavailable at the start
    for g in adapter.groups:
        assert obs[g.name].shape == (E, g.size, *g.obs_shape)
        assert obs[g.name].dtype == jnp.float32
        if g.discrete:
            assert masks[g.name].shape == (E, g.size, g.action_dim)
            assert masks[g.name].dtype == jnp.bool_
            assert bool(jnp.all(jnp.any(masks[g.name], axis=-1)))
            if not g.has_mask:
                assert bool(jnp.all(masks[g.name]))
            # the chosen actions were available
            chosen = jnp.take_along_axis(masks[g.name], actions[g.name][..., None], axis=-1)
            assert bool(jnp.all(chosen))
            assert masks2[g.name].shape == (E, g.size, g.action_dim)
        else:
            assert g.name not in masks and g.name not in masks2
            assert actions[g.name].shape == (E, g.size, g.action_dim)

    assert res.episode_done.shape == (E,)
    assert res.episode_done.dtype == jnp.bool_
    for g in adapter.groups:
        assert res.obs[g.name].shape == (E, g.size, *g.obs_shape)
        assert res.obs[g.name].dtype == jnp.float32
        assert res.reward[g.name].shape == (E, g.size)
        assert res.reward[g.name].dtype == jnp.float32
        assert res.done[g.name].shape == (E, g.size)
        assert res.done[g.name].dtype == jnp.bool_
        assert np.isfinite(np.asarray(res.reward[g.name])).all()


@pytest.mark.parametrize("name", list(CASES))
def test_every_agents_actions_reach_the_env(name):
    """Rolled out with the same keys, where only agent i's actions are drawn from another key, the
    final states differ (in at least one of 8 envs) for every agent i, and are bitwise equal where
    no agent's actions changed (two such rows of the same program: on a GPU a vmapped program need
    not equal the unbatched one bitwise, so the control does not compare across programs). Caught: storm_2p unpacks its actions (`a0, a1 = actions`), and a dict
    handed to it made each agent's action its own index, whatever the policy chose."""
    kwargs, _ = CASES[name]
    adapter = EnvAdapter(make_env(name, kwargs), name)
    n_envs, steps = 8, 8

    def rollout(changed, key):  # changed: the agent whose actions come from the other key (-1: none)
        _, state = jax.vmap(adapter.reset)(jax.random.split(key, n_envs))

        def body(state, k):
            k_act, k_alt, k_step = jax.random.split(k, 3)
            masks = jax.vmap(adapter.action_mask)(state)
            actions = {}
            for j, g in enumerate(adapter.groups):

                def draw(kk, j, g):
                    kk = jax.random.fold_in(kk, j)
                    if g.discrete:  # an available action per agent, [E, A_g]
                        return jax.random.categorical(kk, jnp.where(masks[g.name], 0.0, -jnp.inf))
                    return jax.random.uniform(kk, (n_envs, g.size, g.action_dim), minval=-1.0, maxval=1.0)

                a, alt = draw(k_act, j, g), draw(k_alt, j, g)
                pick = (jnp.asarray(g.indices) == changed).reshape((1, g.size) + (1,) * (a.ndim - 2))
                actions[g.name] = jnp.where(pick, alt, a)
            return jax.vmap(adapter.step)(jax.random.split(k_step, n_envs), state, actions).state, None

        return jax.lax.scan(body, state, jax.random.split(jax.random.fold_in(key, 1), steps))[0]

    changed = jnp.arange(-2, adapter.num_agents).clip(-1)  # [2 + N]: none twice, then each agent in turn
    final = jax.jit(jax.vmap(rollout, in_axes=(0, None)))(changed, jax.random.PRNGKey(0))
    leaves = [np.asarray(x) for x in jax.tree.leaves(final)]  # each [2 + N, E, ...]
    for x in leaves:  # the control: the same actions give the same states, bitwise
        np.testing.assert_array_equal(x[0], x[1])
    for i, agent in enumerate(adapter.agents):
        assert any(not np.array_equal(x[0], x[2 + i]) for x in leaves), (
            f"{name}: agent {agent!r}'s actions changed and the env's state did not"
        )


@pytest.mark.parametrize("num_agents", [2, 5])
def test_storm_inventory_goes_to_its_agent(num_agents):
    """storm's obs["inventory"] is [5 features, N agents]: agent i must get column i.

    With num_agents=5 both axes have length N, and the agent axis must still be the last.
    """
    raw = make_env("storm", {"num_agents": num_agents})
    adapter = EnvAdapter(raw, "storm")
    obs, state = raw.reset(jax.random.PRNGKey(0))
    assert obs["inventory"].shape == (5, num_agents)
    inventory = jnp.arange(5 * num_agents, dtype=obs["inventory"].dtype).reshape(5, num_agents)
    marked = {**obs, "inventory": inventory}
    raw.reset = lambda key: (marked, state)  # the env now reports distinguishable inventories
    grouped, _ = adapter.reset(jax.random.PRNGKey(0))
    (g,) = adapter.groups
    flat = np.asarray(grouped[g.name])  # [N, 5 + 5*5*16]: leaves in key order, inventory first
    for i in range(num_agents):
        np.testing.assert_array_equal(flat[i, :5], np.asarray(inventory)[:, i], err_msg=f"agent {i}")
        np.testing.assert_array_equal(flat[i, 5:], np.asarray(obs["observations"][i], np.float32).ravel())


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    "name, kwargs, field, words",
    [
        ("ant_4x2", {}, "env", ["brax"]),
        ("JaxRobotarium_navigation", {}, "env", ["jaxrobotarium"]),
        ("LearnedPolicyEnemySMAX", {}, "env", ["policy", "params", "HeuristicEnemySMAX"]),
        ("MPE_simple_sprad_v3", {}, "env", ["did you mean 'MPE_simple_spread_v3'"]),
        ("HeuristicEnemySMAX", {"scenario": "99z"}, "env_kwargs.scenario", ["99z", "3m"]),
    ],
)
def test_unsupported_envs_raise_config_error(name, kwargs, field, words):
    with pytest.raises(ConfigError) as info:
        make_env(name, kwargs)
    assert info.value.field == field
    msg = str(info.value)
    assert msg.startswith(f"{field}: ")
    for w in words:
        assert w in msg, msg


def test_check_env_name_unknown_lists_allowed():
    with pytest.raises(ConfigError) as info:
        check_env_name("not_an_env")
    assert "MPE_simple_spread_v3" in str(info.value)
    assert "module:callable" in str(info.value)
    check_env_name("MPE_simple_spread_v3")  # a good id passes


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    name = "marljax_test_user_env_mod"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """
            import jaxmarl

            def make_env(**kw):
                return jaxmarl.make("MPE_simple_spread_v3", **kw)

            NOT_CALLABLE = 3
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_user_env_via_import_path(user_module):
    raw = make_env(f"{user_module}:make_env", {"num_agents": 2, "num_landmarks": 2})
    adapter = EnvAdapter(raw, f"{user_module}:make_env")
    (g,) = adapter.groups
    assert g.size == 2 and g.discrete and g.action_dim == 5
    obs, _ = adapter.reset(jax.random.PRNGKey(0))
    assert obs[g.name].shape == (2, *g.obs_shape)


@pytest.mark.parametrize("attr", ["missing_factory", "NOT_CALLABLE"])
def test_user_env_missing_attribute(user_module, attr):
    with pytest.raises(ConfigError) as info:
        make_env(f"{user_module}:{attr}", {})
    assert info.value.field == "env"
    assert attr in str(info.value)


def test_user_env_missing_module():
    with pytest.raises(ConfigError) as info:
        make_env("marljax_no_such_module_xyz:make_env", {})
    assert info.value.field == "env"
    assert "marljax_no_such_module_xyz" in str(info.value)


def test_bad_env_kwargs_name_the_field():
    with pytest.raises(ConfigError) as info:
        make_env("switch_riddle", {"no_such_kwarg": 1})
    assert info.value.field == "env_kwargs"
    assert "no_such_kwarg" in str(info.value)


def test_making_an_env_keeps_redirected_stdout():
    """jaxmarl's MABrax module resets sys.stdout to sys.__stdout__ on import; a notebook's output
    (a redirected stdout) must survive the first env being made."""
    import subprocess
    import sys

    code = (
        "import io, sys\n"
        "buf = io.StringIO(); sys.stdout = buf\n"
        "from marljax.envs.registry import make_env\n"
        "make_env('MPE_simple_spread_v3')\n"
        "print('still captured')\n"
        "sys.stderr.write('OK' if 'still captured' in buf.getvalue() and sys.stdout is buf else 'LOST')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.stderr.strip().endswith("OK"), proc.stderr[-2000:]
