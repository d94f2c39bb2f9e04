"""Every registered algorithm implements the protocol of `marljax.algos.api`: its pieces derive a
`Trainer` (an `AsyncTrainer` where the algorithm supports mode=async) with every field filled, its
extra state (if any) has a declared layout that fits it, its declared losses are among its
metrics, and its cost pieces compile alone, each with FLOPs and trips, rollout before learning."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest

from marljax.algos import api, registry
from marljax.config import ConfigError, load_config
from marljax.schema import traced_keys
from marljax.train.wiring import make_adapter, make_trainer
from marljax.types import HParams, hparam_keys


@pytest.mark.newest_jax  # each algorithm's own code, lowered and compiled, meets the newest jax too (CI leg 2)
@pytest.mark.parametrize("algo", registry.names())
def test_make_train_fills_the_contract_and_its_cost_pieces_compile(algo, tmp_path):
    schema = registry.get(algo).schema
    replay = ["replay.buffer_size=8", "replay.batch_size=2"] if "replay" in schema.sections else []
    if "offline" in schema.sections:  # an offline algorithm learns from a dataset (marljax/algos/offline.py)
        pytest.importorskip("flashbax")
        from tests._offline import spread_dataset

        replay.append(f"offline.dataset={spread_dataset(tmp_path)}")
    # the default env (MPE spread) with Box actions for an algorithm that takes no Discrete ones
    box = [] if "discrete" in schema.supports.actions else ["env_kwargs.action_type=Continuous"]
    config = load_config(None, [f"algo={algo}", "num_envs=4", "num_steps=4", "total_timesteps=64", *replay, *box])
    trainer = make_trainer(config, make_adapter(config))

    assert isinstance(trainer, api.AsyncTrainer if schema.supports.async_mode else api.Trainer)
    empty = [
        f.name for f in dataclasses.fields(trainer) if getattr(trainer, f.name) is None and f.name != "extra_layout"
    ]
    assert not empty, f"{algo}: fields left None: {empty}"

    state = jax.eval_shape(trainer.init, jax.random.PRNGKey(0))
    # its class of traced hyperparameters has a field for every traced key of its config, and no other
    assert sorted(hparam_keys(type(state.learner.hparams)).values()) == sorted(traced_keys(config)), algo
    assert all(x.shape == () and x.dtype == jnp.float32 for x in jax.tree.leaves(state.learner.hparams)), algo
    assert (trainer.extra_layout is None) == (state.extra is None), algo
    if state.extra is not None:
        trainer.extra_places(state.extra)  # the declaration fits the state (raises otherwise)
    _, metrics = jax.eval_shape(trainer.update, state)
    assert trainer.losses and set(trainer.losses) <= set(metrics.values), (algo, trainer.losses, sorted(metrics.values))
    pieces = trainer.cost_pieces(state)
    assert [p.part for p in pieces][0] == "rollout" and {p.part for p in pieces} == {"rollout", "learn"}
    for piece in pieces:
        cost = jax.jit(piece.fn).lower(*piece.args).compile().cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        assert cost["flops"] > 0 and piece.trips >= 1, (algo, piece.name)
    rollout = next(p for p in pieces if p.part == "rollout")
    assert rollout.trips == config.num_steps


@pytest.mark.parametrize("algo", registry.names())
@pytest.mark.parametrize("kind", ["discrete", "continuous"])
def test_an_action_space_the_algorithm_does_not_declare_is_refused_in_one_line(algo, kind):
    """`Supports.actions` is checked for every algorithm when the env is made (before any build or
    compile): MPE spread with Discrete(5) or Box(5) actions. The declared kind builds (the control)."""
    schema = registry.get(algo).schema
    box = ["env_kwargs.action_type=Continuous"] if kind == "continuous" else []
    sharing = ["param_sharing=independent"] if "shared" not in schema.supports.param_sharing else []
    config = load_config(None, [f"algo={algo}", *box, *sharing])
    if kind in schema.supports.actions:
        assert make_adapter(config).groups[0].discrete == (kind == "discrete")
        return
    with pytest.raises(ConfigError) as info:
        make_adapter(config)
    message = str(info.value)
    space = "Discrete" if kind == "discrete" else "Box"
    assert info.value.field == "algo" and "\n" not in message
    assert f"algo={algo} takes" in message and f"{space} actions in group(s) agents" in message
    takers = [n for n in registry.names() if kind in registry.get(n).schema.supports.actions]
    assert f"algo={', '.join(takers)} take them" in message


def test_the_core_hparams_lack_ppos_traced_keys():
    """Negative control of the hyperparameters check above: the core class misses `ppo.*`'s fields."""
    config = load_config(None, ["algo=ippo"])
    missing = set(traced_keys(config)) - set(hparam_keys(HParams).values())
    assert missing == {"ppo.clip_eps", "ppo.ent_coef", "ppo.gae_lambda", "ppo.vf_coef"}
