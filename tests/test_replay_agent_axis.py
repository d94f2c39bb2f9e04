"""IQL, VDN and QMIX on the `agent` mesh axis (param_sharing=independent): each device learns its
agents' Q-networks from its own agents' replay fields (the per-environment ones whole on every
agent device), and the whole run (learner, target network, replay buffer, every metric) equals
one device's; a checkpoint of the split state resumes bitwise."""

from __future__ import annotations

import pytest

from marljax.config import ConfigError, load_config
from marljax.train.wiring import prepare
from tests._subprocess import run_with_devices, train_runs
from tests._trees import assert_same_run
from tests.test_agent_axis import SPREAD4

# the tolerances below are drifts measured on optimised compiles (tests/conftest.py)
pytestmark = pytest.mark.optimized

# 10 updates of 8 envs x 8 steps; learning from update 2 (learning_starts=128), 2 gradient steps of
# 8 sequences each, the target copied every 3 updates: 8 updates learn, 3 target copies
SETTINGS = [*SPREAD4, "activation=relu", "lr=2e-3", "gamma=0.9", "hidden_size=32", "num_envs=8", "num_steps=8",
            "total_timesteps=640", "num_chunks=10", "replay.buffer_size=32", "replay.batch_size=8",
            "replay.gradient_steps=2", "replay.learning_starts=128", "replay.target_update_interval=3",
            "q.eps_decay_steps=2000"]  # fmt: skip
# Equal to float reduction order for 10 updates. Measured on mesh.agent=2 (iql, vdn, qmix
# feed-forward, qmix GRU): learner and target max |diff| 1.2e-7, replay buffer 2.8e-7 (GRU states),
# metrics 9.2e-5 on losses of ~50 (relative 3.4e-7). Tolerance |diff| <= ATOL + RTOL * |x|: about
# 3.5x the buffer's and 12x the metrics' drift. The controls differ by 1.0-1.2.
ATOL, RTOL = 1e-6, 4e-6
# the negative control: two agents' Q-networks exchanged (learner, Adam moments, target network),
# not the rows of QMIX's mixer, so it tests the agent layout only
OWN_AGENTS = dict(axis=1, where="['agents']['params']")

FF = [("iql", ["algo=iql"]), ("vdn", ["algo=vdn"]), ("qmix", ["algo=qmix"])]
GRU = [("iql_gru", ["algo=iql", "recurrent=true"]), ("vdn_gru", ["algo=vdn", "recurrent=true"]),
       ("qmix_gru", ["algo=qmix", "recurrent=true"])]  # fmt: skip


def _compare(tmp_path, runs, mesh: list[str], n_devices: int, base: list[str] = SETTINGS, ref: list[str] = (),
             n_ref: int = 1, atol: float = ATOL) -> None:  # fmt: skip
    """Each run on `mesh` (n_devices) against the same run on `ref` (n_ref devices): whole run trees."""
    one = train_runs(tmp_path / "ref", base, [(n, o + list(ref)) for n, o in runs], n_ref)
    many = train_runs(tmp_path / "split", base, [(n, o + mesh) for n, o in runs], n_devices)
    for name, _ in runs:
        (_, a), (info, b) = one[name], many[name]
        assert info["mesh"]["agent"] > 1 and len(a["['rows']['update']"]) == 10
        assert (a["['rows']['loss_total']"][2:] > 0).all(), "no learning in updates 3-10"
        assert_same_run(a, b, atol=atol, rtol=RTOL, controls=(OWN_AGENTS,))


@pytest.mark.slow
@pytest.mark.nightly  # nightly since 2026-11-28: CI's time (issue 63); IPPO's heterogeneous groups on the agent axis run in CI
def test_replay_algorithms_on_agent_axis_match_one_device(tmp_path):
    """Recurrent QMIX (the team loss through the mixer, the replayed GRU, the all-gather of every
    agent's values) on mesh.agent=2 (2 agents per device): ~1.2 CPU-minutes (each run compiles)."""
    _compare(tmp_path, [GRU[2]], ["mesh.agent=2"], 2)


@pytest.mark.slow
@pytest.mark.nightly  # ~6 CPU-minutes; CI keeps recurrent qmix on mesh.agent=2
def test_other_replay_algorithms_on_agent_axis_4_match_one_device(tmp_path):
    """The other five (IQL, VDN and QMIX feed-forward, IQL and VDN recurrent) on mesh.agent=4: one
    agent per device."""
    _compare(tmp_path, [*FF, GRU[0], GRU[1]], ["mesh.agent=4"], 4)


@pytest.mark.slow
@pytest.mark.nightly
def test_a_lambda_over_the_time_limit_bootstrap_on_agent_axis_matches_one_device(tmp_path):
    """VDN with q.td_lambda=0.5 over spread's time-limit bootstrap (MPE's family default) on mesh.agent=2: the
    buffer's record of the cuts lies per environment, whole on every agent device, like done (SETTINGS' 80 steps
    per env hold 3 cuts)."""
    _compare(tmp_path, [("vdn_lambda", ["algo=vdn", "q.td_lambda=0.5"])], ["mesh.agent=2"], 2)


@pytest.mark.slow
@pytest.mark.nightly  # ~3 CPU-minutes
def test_shaq_and_batch_norm_on_agent_axis_match_one_device(tmp_path):
    """SHAQ (its alpha network on the world state, its agent orders drawn per gradient step, the
    greedy flags gathered from every agent device) and VDN with batch norm (each device's agents'
    running statistics, learned and kept beside their parameters) on mesh.agent=2.

    Measured: SHAQ's state max |diff| 1.2e-7 (ATOL); batch norm's 1.9e-6, on the biases of the dense
    layers a batch norm follows (and the input norm's): the norm subtracts the batch mean, so their true
    gradient is 0 and what they get is float noise, which Adam scales to steps of lr's size. Its atol
    1e-5 is about 5x that."""
    _compare(tmp_path, [("shaq", ["algo=shaq"])], ["mesh.agent=2"], 2)
    batch_norm = [("vdn_batch_norm", ["algo=vdn", "q.norm=batch_norm", "q.norm_input=true"])]
    _compare(tmp_path / "batch_norm", batch_norm, ["mesh.agent=2"], 2, atol=1e-5)


@pytest.mark.slow
@pytest.mark.nightly
def test_replay_on_data_and_agent_axes_matches_data_alone(tmp_path):
    """mesh.data=2 x mesh.agent=2 against mesh.data=2: each data shard keeps and samples its own
    environments' replay, the same slots on both agent devices of its column."""
    _compare(tmp_path, [FF[2], GRU[1]], ["mesh.data=2", "mesh.agent=2"], 4, ref=["mesh.data=2"], n_ref=2)


@pytest.mark.slow
@pytest.mark.nightly
def test_replay_heterogeneous_groups_split_over_agent_axis(tmp_path):
    """simple_tag with 4 adversaries and 2 good agents: two groups, each split over 2 devices; the
    agents' values come back in the env's order (group after group) for VDN's sum and QMIX's mixer."""
    tag = [s for s in SETTINGS if not s.startswith("env_kwargs")] + [
        "env=MPE_simple_tag_v3", "env_kwargs.num_adversaries=4", "env_kwargs.num_good_agents=2"]  # fmt: skip
    runs = [("vdn", ["algo=vdn"]), ("qmix_gru", ["algo=qmix", "recurrent=true"])]
    one = train_runs(tmp_path / "ref", tag, runs, 1)
    two = train_runs(tmp_path / "split", tag, [(n, o + ["mesh.agent=2"]) for n, o in runs], 2)
    # simple_tag's physics drifts more than spread's: at ATOL, RTOL its replayed observations
    # differed by up to 3.2e-6 (relative 1.5e-5, 3 of 10368 values); tolerance about 3x that
    for name, _ in runs:
        for group in ("adversary", "agent"):
            control = dict(axis=1, where=f"['{group}']['params']")
            assert_same_run(one[name][1], two[name][1], atol=1e-5, rtol=5e-5, controls=(control,))


_RESUME = """
import json, jax, numpy as np
# the three runs compile the same program: compile it once
jax.config.update("jax_compilation_cache_dir", "{out}/cache")
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
from marljax.config import load_config
from marljax.train.loop import train
from tests._trees import flat
base = {base!r}
ref = train(load_config(None, base + ["out_dir={out}/ref"]), log=lambda s: None)
train(load_config(None, base + ["out_dir={out}/killed"]), log=lambda s: None, max_chunks=5)
res = train(load_config(None, base + ["out_dir={out}/killed", "resume=true"]), log=lambda s: None)
strip = lambda rows: [{{k: v for k, v in r.items() if k not in ("wall_s", "env_steps_per_s")}} for r in rows]
a, b = flat((ref.state.learner, ref.state.extra)), flat((res.state.learner, res.state.extra))
same = all(np.array_equal(a[k], b[k], equal_nan=True) for k in a) and strip(ref.rows) == strip(res.rows)
specs = {{name: str(leaf.sharding.spec) for name, leaf in (("obs", res.state.extra.buffer.data["obs"]["agents"]),
         ("hidden", res.state.extra.buffer.data["hidden"]["agents"]), ("reward", res.state.extra.buffer.data["reward"]),
         ("target", jax.tree.leaves(res.state.extra.target["agents"])[0]))}}
print(json.dumps({{"same": same, "rows": len(res.rows), "specs": specs}}))
"""


@pytest.mark.slow
@pytest.mark.nightly
def test_replay_checkpoint_on_agent_axis_resumes_bitwise(tmp_path):
    """Recurrent QMIX on mesh.agent=2, stopped after 5 of 10 chunks and resumed: the split replay
    (per-agent fields and GRU states over `agent`), the split target network and the rows come back."""
    base = [*SETTINGS, "algo=qmix", "recurrent=true", "mesh.agent=2", "checkpoint_every=1", "progress=false",
            "plot=false"]  # fmt: skip
    res = run_with_devices(_RESUME.format(base=base, out=tmp_path), 2)
    assert res["same"] and res["rows"] == 10
    # (seed and data have one device each: their axes print as None) the agents' fields and
    # target network split over `agent` on their agent axis, the per-env reward whole
    assert res["specs"] == {"obs": "P(None, None, None, 'agent')", "hidden": "P(None, None, 'agent')",
                            "reward": "P()", "target": "P(None, 'agent')"}  # fmt: skip


def test_replay_agent_axis_errors_name_the_field_before_compiling():
    # shared or per-role Q-networks cannot split over agent
    with pytest.raises(ConfigError, match="mesh.agent.*param_sharing=independent"):
        load_config(None, ["algo=vdn", "mesh.agent=2"])
    # 3 devices on agent cannot split a group of 4 agents (checked before the devices)
    for algo in ("iql", "vdn", "qmix"):
        cfg = load_config(None, [*SETTINGS, f"algo={algo}", "mesh.agent=3", "num_envs=12", "replay.buffer_size=36"])
        with pytest.raises(ConfigError, match=r"mesh.agent.*agents \(4\); allowed: \[1, 2, 4\]"):
            prepare(cfg)
