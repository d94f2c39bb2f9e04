"""network.<group>.hidden_size / num_layers: per-group network sizes over the global ones."""

import jax
import numpy as np
import pytest

from marljax.config import ConfigError, load_config
from marljax.train.wiring import make_adapter, make_trainer, prepare

SL = "env=MPE_simple_speaker_listener_v4"  # groups: speaker (obs 3, 3 actions), listener (obs 11, 5 actions)
TINY = [
    "num_envs=2",
    "num_steps=4",
    "ppo.num_minibatches=2",
    "ppo.update_epochs=1",
    "total_timesteps=16",
    "hidden_size=8",
]
UNEQUAL = ["network.speaker.hidden_size=4", "network.listener.hidden_size=24", "network.listener.num_layers=3"]


def _trainer(*overrides, tiny=TINY):
    """The unsharded trainer (one device: `train` runs under plain jit)."""
    cfg = load_config(None, [SL] + tiny + list(overrides))
    return make_trainer(cfg, make_adapter(cfg))


def _kernels(trainer, scope: str) -> dict:
    """group -> [kernel shapes of `scope` (a module name, or '' for the top level)] in layer order."""
    params = jax.eval_shape(trainer.init, jax.random.PRNGKey(0)).learner.params
    out = {}
    for g, p in params.items():
        node = p["params"][scope] if scope else p["params"]
        out[g] = [node[f"Dense_{i}"]["kernel"].shape for i in range(len(node)) if f"Dense_{i}" in node]
    return out


@pytest.mark.parametrize("mode", ["shared", "per_role", "independent"])
def test_feed_forward_widths_and_depths_follow_each_group(mode):
    kernels = _kernels(_trainer(f"param_sharing={mode}", *UNEQUAL), "actor")
    assert kernels == {
        "speaker": [(1, 3, 4), (1, 4, 4)],  # global num_layers=2, width 4
        "listener": [(1, 11, 24), (1, 24, 24), (1, 24, 24)],  # 3 layers of 24
    }


@pytest.mark.parametrize("mode", ["shared", "independent"])
def test_recurrent_head_widths_follow_each_group_gru_state_stays_global(mode):
    kernels = _kernels(_trainer("recurrent=true", "gru_hidden_size=16", f"param_sharing={mode}", *UNEQUAL), "")
    # Dense_0: embedding to the GRU (global 16); Dense_1/2: actor/critic layers (the group's width)
    assert kernels["speaker"][:3] == [(1, 3, 16), (1, 16, 4), (1, 16, 4)]
    assert kernels["listener"][:3] == [(1, 11, 16), (1, 16, 24), (1, 16, 24)]


def test_independent_sets_keep_the_agent_axis_per_group():
    tag = ["env=MPE_simple_tag_v3", "param_sharing=independent", "network.adversary.hidden_size=4"]
    cfg = load_config(None, TINY + tag)
    trainer = make_trainer(cfg, make_adapter(cfg))
    params = jax.eval_shape(trainer.init, jax.random.PRNGKey(0)).learner.params
    assert params["adversary"]["params"]["actor"]["Dense_0"]["kernel"].shape == (3, 16, 4)
    assert params["agent"]["params"]["actor"]["Dense_0"]["kernel"].shape == (1, 14, 8)  # global width


# ~30 s each on this 2-core machine under load (mostly compiling): the GRU and MAPPO runs are nightly
@pytest.mark.parametrize("extra", [
    ["param_sharing=shared"],
    pytest.param(["recurrent=true", "gru_hidden_size=8", "param_sharing=independent"], marks=pytest.mark.nightly),
    pytest.param(["algo=mappo"], marks=pytest.mark.nightly),
])  # fmt: skip
def test_unequal_widths_train_with_finite_losses(extra):
    trainer = _trainer(*extra, *UNEQUAL, "ppo.num_minibatches=1", "total_timesteps=8")  # one update
    state, metrics = jax.jit(trainer.train)(jax.random.PRNGKey(0))
    assert np.all(np.isfinite(np.asarray(metrics["loss_total"])))
    assert state.learner.params["listener"]["params"]["pi"]["Dense_0"]["kernel"].shape[1] == 24


def test_q_learning_takes_group_widths():
    trainer = _trainer("algo=iql", "network.speaker.hidden_size=4", "network.speaker.num_layers=1", tiny=[
        "num_envs=2", "num_steps=4", "total_timesteps=16", "hidden_size=8"])  # fmt: skip
    params = jax.eval_shape(trainer.init, jax.random.PRNGKey(0)).learner.params
    assert params["speaker"]["params"]["Dense_0"]["kernel"].shape == (1, 3, 4)
    assert "Dense_2" not in params["speaker"]["params"]  # one hidden layer, then the value head (Dense_1)
    assert params["listener"]["params"]["Dense_2"]["kernel"].shape == (1, 8, 5)


def test_unknown_group_is_a_config_error_before_compiling(monkeypatch):
    compiled = []
    monkeypatch.setattr(jax, "jit", lambda *a, **k: compiled.append(a) or pytest.fail("compiled"))
    with pytest.raises(ConfigError, match=r"network\.speakr: .*no group 'speakr'.*its groups: speaker, listener"):
        prepare(load_config(None, [SL, "network.speakr.hidden_size=4"]))
    # per_role names groups by role: the message lists those the run would have
    with pytest.raises(
        ConfigError, match=r"network\.adversary: .*param_sharing=per_role; its groups: adversaries, agents"
    ):
        prepare(
            load_config(None, ["env=MPE_simple_tag_v3", "param_sharing=per_role", "network.adversary.hidden_size=4"])
        )
    assert compiled == []


@pytest.mark.parametrize("bad, match", [
    ("network.speaker.width=4", r"network\.speaker\.width: unknown key.*hidden_size, num_layers"),
    ("network.speaker.hidden_size=0", r"network\.speaker\.hidden_size: must be an integer in \[1, .*got 0"),
    ("network.speaker.num_layers=1.5", r"network\.speaker\.num_layers: must be an integer in \[1, .*got 1\.5"),
    ("network.speaker=4", r"network\.speaker: expected a mapping"),
])  # fmt: skip
def test_bad_sizes_are_config_errors(bad, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, [SL, bad])


@pytest.mark.slow
def test_overrides_equal_to_the_globals_change_nothing_bitwise():
    """The setting absent and the setting naming the global sizes: same shapes, same 2 updates."""
    tiny = [o for o in TINY if not o.startswith("hidden_size")]  # the default width 64; 2 updates of 2 envs x 4 steps

    def run(*overrides):
        cfg = load_config(None, [SL] + tiny + list(overrides))
        trainer = make_trainer(cfg, make_adapter(cfg))
        assert cfg.num_updates == 2
        return jax.jit(trainer.train)(jax.random.PRNGKey(3))

    base = run()
    same = run("network.speaker.hidden_size=64", "network.listener.num_layers=2")
    for a, b in zip(jax.tree.leaves(base), jax.tree.leaves(same), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

    # negative control (init only, no second compile): a real override changes the parameters
    def shapes(*o):
        return [
            x.shape
            for x in jax.tree.leaves(jax.eval_shape(_trainer(*o, tiny=tiny).init, jax.random.PRNGKey(3)).learner.params)
        ]

    assert shapes() == [x.shape for x in jax.tree.leaves(base[0].learner.params)]
    assert shapes("network.speaker.hidden_size=32") != shapes()


def test_config_round_trips_and_accepts_yaml_mapping(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("env: MPE_simple_speaker_listener_v4\nnetwork:\n  speaker: {hidden_size: 16}\n")
    cfg = load_config(path, ["network.speaker.num_layers=1", "network.listener.hidden_size=128"])
    assert cfg.network == {"speaker": {"hidden_size": 16, "num_layers": 1}, "listener": {"hidden_size": 128}}
    assert cfg.group_network("speaker") == (16, 1) and cfg.group_network("listener") == (128, 2)
    from marljax.config import from_dict

    assert from_dict(cfg.to_dict()) == cfg


def _mlp_params(obs: int, h: int, layers: int, out: int) -> tuple[int, int]:
    """(parameters, kernel entries) of an MLP obs -> h x layers -> out."""
    kernels = obs * h + (layers - 1) * h * h + h * out
    return kernels + layers * h + out, kernels


def test_bench_group_costs_follow_the_widths():
    """Each group's parameters exactly, and its forward FLOPs per agent step within 10% of
    2 x kernel entries (actor and critic; elementwise ops make up the rest)."""
    from marljax.bench.groups import group_costs

    cfg = load_config(None, [SL, "num_envs=2", "num_steps=4", "total_timesteps=8",
                             "network.speaker.hidden_size=32", "network.listener.hidden_size=256"])  # fmt: skip
    trainer = make_trainer(cfg, make_adapter(cfg))
    costs = group_costs(cfg, trainer, jax.eval_shape(trainer.init, jax.random.PRNGKey(0)))
    for g, obs, h, actions in (("speaker", 3, 32, 3), ("listener", 11, 256, 5)):
        actor, actor_k = _mlp_params(obs, h, 2, actions)
        critic, critic_k = _mlp_params(obs, h, 2, 1)
        assert costs[f"group_{g}_agents"] == 1
        assert costs[f"group_{g}_params"] == actor + critic
        assert costs[f"group_{g}_forward_flops_per_agent_step"] == pytest.approx(2 * (actor_k + critic_k), rel=0.10)


@pytest.mark.nightly  # two trainings on 2 fake devices in a subprocess: ~90 s on this machine
def test_unequal_groups_split_over_the_agent_axis_match_one_device():
    """simple_tag with 2 adversaries (width 4) and 2 good agents (width 16, 3 layers), one set per
    agent: mesh.agent=2 splits each group's sets and gives one device's numbers (tight tolerance)."""
    from tests._subprocess import run_with_devices

    out = run_with_devices("""
        import json, jax, numpy as np
        from marljax.config import load_config
        from marljax.train.loop import train
        import tempfile
        base = ["env=MPE_simple_tag_v3", "env_kwargs.num_good_agents=2", "env_kwargs.num_adversaries=2",
                "param_sharing=independent", "num_envs=4", "num_steps=4", "ppo.num_minibatches=1", "ppo.update_epochs=1",
                "total_timesteps=32", "num_chunks=1", "hidden_size=8", "network.adversary.hidden_size=4",
                "network.agent.hidden_size=16", "network.agent.num_layers=3", "progress=false", "plot=false"]
        res = {}
        for k in (1, 2):
            r = train(load_config(None, base + [f"mesh.agent={k}", f"out_dir={tempfile.mkdtemp()}/run"]), log=lambda s: None)
            p = r.state.learner.params
            res[k] = {"leaves": [np.asarray(x).ravel().tolist() for x in jax.tree.leaves(p)],
                      "spec": str(jax.tree.leaves(p["agent"])[0].sharding.spec),
                      "kernel": list(p["agent"]["params"]["actor"]["Dense_2"]["kernel"].shape)}
        print(json.dumps(res))
    """, n_devices=2)  # fmt: skip
    one, two = out["1"], out["2"]
    assert "agent" in two["spec"] and "agent" not in one["spec"]  # split on 2 devices, whole on 1
    assert one["kernel"] == two["kernel"] == [1, 2, 16, 16]  # [seeds, sets, 16, 16]: the third layer
    for a, b in zip(one["leaves"], two["leaves"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
