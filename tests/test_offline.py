"""The offline algorithms (bc, iql_cql, maicq; marljax/algos/offline.py): each trains two updates
from a dataset through the run driver (seeds vmapped, evaluated online in the dataset's env,
checkpointed), a stopped run resumes bitwise, the dataset is refused in one line before anything
compiles when it is missing, damaged or another env's, and a run on a 2-device data mesh learns
from each shard's own samples. That they learn: tests/test_offline_learn.py (nightly)."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

pytest.importorskip("flashbax")

from marljax.config import ConfigError, load_config  # noqa: E402
from marljax.train.loop import train  # noqa: E402
from marljax.train.wiring import make_adapter, make_trainer  # noqa: E402
from tests._offline import spread_dataset  # noqa: E402
from tests._subprocess import run_with_devices  # noqa: E402

OFFLINE = ("bc", "iql_cql", "maicq")
# 2 updates of 8 sequences x 2 steps, 2 seeds, evaluated after each on 2 episodes
TINY = ["num_envs=8", "num_steps=2", "total_timesteps=32", "eval_every=1", "eval_episodes=2", "num_chunks=2",
        "num_seeds=2", "hidden_size=16", "progress=false", "plot=false", "compile_cache=false"]  # fmt: skip


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return spread_dataset(tmp_path_factory.mktemp("data"))


def _config(algo: str, dataset, *extra: str):
    return load_config(None, [f"algo={algo}", f"offline.dataset={dataset}", *TINY, *extra])


@pytest.mark.parametrize("algo", OFFLINE)
def test_two_updates_from_the_dataset_evaluated_online_and_checkpointed(algo, dataset, tmp_path):
    config = _config(algo, dataset, f"out_dir={tmp_path / 'run'}")
    result = train(config, log=lambda _: None)
    rows = result.rows
    assert [r["update"] for r in rows] == [1, 2] and rows[-1]["env_steps"] == 2 * 8 * 2  # transitions learned
    for row in rows:
        assert np.isfinite(row["loss_total"]) and row["episodes"] == 0 and row["return_mean"] is None
        assert len(row["eval_return_per_seed"]) == 2 and row["eval_episode_length"] == 26  # MPE's episodes, online
    assert result.checkpoints == [2] and (tmp_path / "run" / "checkpoints" / "2").is_dir()
    fresh = jax.vmap(make_trainer(config, make_adapter(config)).init)(jax.random.split(jax.random.PRNGKey(0), 2))
    moved = [not np.allclose(a, b) for a, b in zip(jax.tree.leaves(result.state.learner.params),
                                                   jax.tree.leaves(fresh.learner.params))]  # fmt: skip
    assert any(moved)  # the learner learned from the data


@pytest.mark.slow
def test_a_stopped_offline_run_resumes_bitwise(dataset, tmp_path):
    """iql_cql keeps a target network and the dataset in its extra state; both come back from the checkpoint."""
    whole = train(_config("iql_cql", dataset, f"out_dir={tmp_path / 'whole'}", "eval_every=0"), log=lambda _: None)
    cut = _config("iql_cql", dataset, f"out_dir={tmp_path / 'cut'}", "eval_every=0", "checkpoint_every=1")
    train(cut, log=lambda _: None, max_chunks=1)
    from marljax.config import replace

    resumed = train(replace(cut, resume=True), log=lambda _: None)
    for a, b in zip(jax.tree.leaves(whole.state), jax.tree.leaves(resumed.state)):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    assert [r["loss_total"] for r in whole.rows] == [r["loss_total"] for r in resumed.rows]


def test_the_dataset_is_refused_in_one_line_before_anything_compiles(dataset, tmp_path):
    with pytest.raises(ConfigError) as info:  # none given: refused when the algorithm is built
        make_trainer(load_config(None, ["algo=bc"]), make_adapter(load_config(None, ["algo=bc"])))
    assert info.value.field == "offline.dataset" and "marljax record writes one" in str(info.value)
    with pytest.raises(
        ConfigError,
        match=r"^env: MPE_simple_reference_v3: the dataset .* was recorded on "
        r"MPE_simple_spread_v3; learn in its env: env=MPE_simple_spread_v3$",
    ):
        _config("bc", dataset, "env=MPE_simple_reference_v3")
    with pytest.raises(
        ConfigError,
        match=r"^num_steps: a sequence of 62 steps does not fit the dataset's streams "
        r"of 60 steps; allowed: num_steps <= 59$",
    ):
        config = _config("iql_cql", dataset, "num_steps=61", "total_timesteps=488")
        make_trainer(config, make_adapter(config))
    with pytest.raises(ConfigError, match=r"^q.td_lambda: algo=iql_cql learns one-step targets"):
        _config("iql_cql", dataset, "q.td_lambda=0.5")
    damaged = spread_dataset(tmp_path, uid="Medium")
    data = sorted((damaged / "d").iterdir(), key=lambda p: p.stat().st_size)[-1]
    data.write_bytes(data.read_bytes()[:-10])
    config = _config("maicq", damaged)  # the description reads: refused when the arrays are read, before compiling
    with pytest.raises(ConfigError) as info:
        make_trainer(config, make_adapter(config))
    assert info.value.field == "offline.dataset" and str(data) in str(info.value) and "\n" not in str(info.value)


def test_a_dataset_of_other_shapes_is_refused_naming_what_differs(tmp_path):
    """A Vault marljax did not write names no env: its shapes are checked against the run's."""
    path = spread_dataset(tmp_path)
    (path / "marljax.json").unlink()  # as if written by another tool: no description, no digests
    meta = json.loads((path / "metadata.json").read_text())
    assert meta["structure_shape"]["observations"].endswith(", 3, 18)")
    config = _config("bc", path, "env=MPE_simple_spread_v3", "env_kwargs.num_agents=4", "env_kwargs.num_landmarks=4")
    with pytest.raises(ConfigError, match=r"^offline.dataset: .*: its agents are 3, MPE_simple_spread_v3's 4: a "
                                          "dataset of another env"):  # fmt: skip
        make_trainer(config, make_adapter(config))


@pytest.mark.slow
def test_on_a_two_device_data_mesh_each_shard_samples_its_own_windows(tmp_path):
    path = spread_dataset(tmp_path)
    out = run_with_devices(
        f"""
        import json, jax, numpy as np
        from marljax.config import load_config
        from marljax.train.loop import train
        base = ["algo=iql_cql", "offline.dataset={path}", *{TINY!r}, "eval_every=0"]
        runs = {{}}
        for name, mesh in (("one", "mesh.seed=2"), ("two", "mesh.data=2 mesh.seed=1")):
            res = train(load_config(None, base + [*mesh.split(), "out_dir={tmp_path}/" + name]), log=lambda s: None)
            leaf = jax.tree.leaves(res.state.learner.params)[0]
            runs[name] = {{"loss": [r["loss_total"] for r in res.rows], "mesh": dict(leaf.sharding.mesh.shape)}}
        print(json.dumps(runs))
    """,
        2,
    )
    assert out["two"]["mesh"]["data"] == 2 and all(np.isfinite(out["two"]["loss"]))
    assert out["one"]["loss"][0] != out["two"]["loss"][0]  # each shard drew its own windows


def test_copy_params_takes_every_shared_leaf_and_refuses_another_shape():
    from marljax.train.finetune import copy_params

    ones, zeros = np.ones, np.zeros
    offline = {"agents": {"actor": {"kernel": ones((2, 4))}, "critic": {"kernel": ones((2, 3))}}}
    online = {"agents": {"actor": {"kernel": zeros((2, 4))}, "value": {"kernel": zeros((2, 5))}}, "__mixer__": {}}
    params, said = copy_params(offline, online, ["agents"], "run")
    assert np.all(params["agents"]["actor"]["kernel"] == 1) and np.all(params["agents"]["value"]["kernel"] == 0)
    assert said == ["agents: 1 of 2 parameter arrays copied, 1 initialised afresh; 1 of the offline run's left out"]
    with pytest.raises(ConfigError, match=r"^algo: the network of group agents differs .*\['actor'\]\['kernel'\] is "
                                          r"\(2, 8\) there, \(2, 4\) here"):  # fmt: skip
        copy_params({"agents": {"actor": {"kernel": ones((2, 8))}}}, online, ["agents"], "run")
    with pytest.raises(ConfigError, match="share no parameter with this algorithm's"):
        copy_params({"agents": {"q": {"kernel": ones((2, 4))}}}, online, ["agents"], "run")


@pytest.mark.slow
def test_a_bc_run_continues_online_as_ippo_from_its_parameters(dataset, tmp_path):
    from marljax.train.finetune import finetune

    bc_config = _config("bc", dataset, f"out_dir={tmp_path / 'bc'}", "eval_every=0")
    bc = train(bc_config, log=lambda _: None)
    lines = []
    online = ["num_envs=4", "num_steps=8", "total_timesteps=64", "num_chunks=2", "progress=false", "plot=false",
              "compile_cache=false", f"out_dir={tmp_path / 'ippo'}"]  # fmt: skip
    result = finetune(tmp_path / "bc", online, log=lines.append, max_chunks=1)
    said = next(line for line in lines if line.startswith("ippo continues bc's policy"))
    assert said.endswith(
        "agents: 12 of 12 parameter arrays copied"
    )  # IPPO's actor-critic whole, the (untrained) critic too
    assert [r["update"] for r in result.rows] == [1]  # a run like any other: it stopped after one chunk
    meta = json.loads((tmp_path / "ippo" / "checkpoints" / "0" / "meta" / "metadata").read_text())
    assert meta["continues"]["algo"] == "bc" and meta["config"]["hidden_size"] == 16  # the offline run's network
    # update 0 of the online run holds BC's parameters exactly (not IPPO's own initialisation, which the same
    # seed makes equal to BC's before BC learned: the two are told apart by BC's two steps)
    import orbax.checkpoint as ocp

    saved = ocp.StandardCheckpointer().restore(tmp_path / "ippo" / "checkpoints" / "0" / "state")
    copied, trained = jax.tree.leaves(saved["learner"]["params"]), jax.tree.leaves(bc.state.learner.params)
    assert len(copied) == len(trained) and all(np.array_equal(a, np.asarray(b)) for a, b in zip(copied, trained))
    fresh = jax.vmap(make_trainer(bc_config, make_adapter(bc_config)).init)(jax.random.split(jax.random.PRNGKey(0), 2))
    assert not all(np.array_equal(a, np.asarray(b)) for a, b in zip(copied, jax.tree.leaves(fresh.learner.params)))
