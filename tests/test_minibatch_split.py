"""`<section>.minibatch_split=envs`: minibatches of whole rollouts of num_envs/num_minibatches
environments (JaxMARL's PPO splits the actors), for a num_minibatches that does not divide num_steps."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marljax.algos.ippo import PPOConfig
from marljax.algos.learning import Minibatches
from marljax.config import ConfigError, load_config
from marljax.train.wiring import make_adapter, make_trainer
from tests.test_jaxmarl_config import _write

T, E, M = 10, 16, 4  # JaxMARL's ippo_ff_mpe_facmac.yaml: 10 steps, 4 minibatches


def _data() -> jax.Array:
    """[T, E, 2]: (env, step) of every sample."""
    return jnp.stack(jnp.meshgrid(jnp.arange(E), jnp.arange(T))[::-1], axis=-1)[..., ::-1]


def _envs_of(minibatches: jax.Array) -> list[set[int]]:
    """[M, T, n, 2] -> each minibatch's set of environments, checking it holds their whole rollouts in order."""
    out = []
    for mb in np.asarray(minibatches):
        assert (mb[:, :, 1] == np.arange(T)[:, None]).all()  # every step, in time order
        assert (mb[:, :, 0] == mb[:1, :, 0]).all()  # the same envs at every step
        out.append(set(mb[0, :, 0].tolist()))
    return out


def test_a_minibatch_is_whole_rollouts_and_the_deal_does_not_depend_on_the_mesh():
    one = Minibatches(T, M, 1, E, E, None, by_envs=True)
    key = jax.random.PRNGKey(3)
    whole = _envs_of(one.shuffle(_data(), key))
    assert sorted(len(s) for s in whole) == [E // M] * M and set().union(*whole) == set(range(E))
    # two data shards (vmapped under an axis name, as shard_map names mesh.data): shard d holds envs
    # [8d, 8d + 8); their minibatch m together is one device's minibatch m
    two = Minibatches(T, M, 1, E, E // 2, "data", by_envs=True)
    shards = _data().reshape(T, 2, E // 2, 2).swapaxes(0, 1)  # [2, T, E/2, 2]
    split = jax.vmap(lambda d: two.shuffle(d, key), axis_name="data")(shards)  # [2, M, T, E/2M, 2]
    per_shard = [_envs_of(split[d]) for d in range(2)]
    assert [a | b for a, b in zip(*per_shard, strict=True)] == whole
    # another key deals otherwise (the negative control: the deal is random, not the identity)
    assert _envs_of(one.shuffle(_data(), jax.random.PRNGKey(4))) != whole


def test_the_split_names_what_must_divide_what():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["num_steps=10", "ppo.num_minibatches=4"])
    assert err.value.field == "ppo.num_minibatches" and "or ppo.minibatch_split=envs" in str(err.value)
    assert load_config(None, ["num_steps=10", "ppo.num_minibatches=4", "ppo.minibatch_split=envs"])
    with pytest.raises(ConfigError) as err:
        load_config(None, ["num_envs=6", "ppo.num_minibatches=4", "ppo.minibatch_split=envs"])
    assert err.value.field == "ppo.num_minibatches" and "must divide num_envs=6" in str(err.value)
    config = load_config(None, ["num_envs=8", "ppo.num_minibatches=8", "ppo.minibatch_split=envs", "mesh.data=2"])
    with pytest.raises(ConfigError, match="deals each device's 4 environments into 8 minibatches"):
        Minibatches.of(config, config.section(PPOConfig), type("L", (), {"num_data": 2, "data_axis": "data"})())


@pytest.mark.parametrize("overrides", [
    ["algo=ippo"], ["algo=ippo", "recurrent=true"], ["algo=mappo", "recurrent=true"],
    ["algo=happo", "recurrent=true"], ["algo=pqn_vdn", "recurrent=true", "pqn.minibatch_split=envs"],
    ["algo=sable"], ["algo=sable", "recurrent=true"],
], ids=["ippo", "ippo-rnn", "mappo-rnn", "happo-rnn", "pqn-rnn", "sable", "sable-rnn"])  # fmt: skip
def test_every_epoch_learner_takes_minibatches_of_environments(overrides):
    split = [] if any("pqn" in o for o in overrides) else ["ppo.minibatch_split=envs", "ppo.num_minibatches=4"]
    config = load_config(
        None, ["num_envs=8", "num_steps=6", "total_timesteps=96", "hidden_size=16", *split, *overrides]
    )
    trainer = make_trainer(config, make_adapter(config))
    state, metrics = jax.jit(trainer.update)(trainer.init(jax.random.PRNGKey(0)))
    assert np.isfinite(float(metrics["loss_total"])) and int(state.learner.update) == 1


def test_a_jaxmarl_file_whose_minibatches_do_not_divide_its_steps_splits_the_environments(tmp_path):
    base = '"ENV_NAME": "MPE_simple_spread_v3"\n"NUM_ENVS": 16\n"NUM_STEPS": 10\n"TOTAL_TIMESTEPS": 16000\n'
    facmac = load_config(_write(tmp_path, "ippo_ff_mpe.yaml", base + '"NUM_MINIBATCHES": 4\n'))
    assert (facmac.section(PPOConfig).num_minibatches, facmac.section(PPOConfig).minibatch_split) == (4, "envs")
    divides = load_config(_write(tmp_path, "ippo_ff_mpe.yaml", base + '"NUM_MINIBATCHES": 2\n'))
    assert (divides.section(PPOConfig).num_minibatches, divides.section(PPOConfig).minibatch_split) == (2, "time")
