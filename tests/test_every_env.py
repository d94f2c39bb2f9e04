"""Every JaxMARL env that imports from the PyPI package runs, feed-forward and recurrent: two tiny IPPO
updates, finite losses and parameters. (That it *learns* is shown per env family in test_learns.py.)"""

import jax
import numpy as np
import pytest

from marljax.algos.ippo import make_train
from marljax.config import load_config
from marljax.envs.adapter import EnvAdapter
from marljax.envs.registry import make_env

ENVS = {
    "MPE_simple_v3": {}, "MPE_simple_tag_v3": {}, "MPE_simple_world_comm_v3": {},
    "MPE_simple_spread_v3": {}, "MPE_simple_crypto_v3": {}, "MPE_simple_speaker_listener_v4": {},
    "MPE_simple_push_v3": {}, "MPE_simple_adversary_v3": {}, "MPE_simple_reference_v3": {},
    "MPE_simple_facmac_v1": {}, "MPE_simple_facmac_3a_v1": {}, "MPE_simple_facmac_6a_v1": {},
    "MPE_simple_facmac_9a_v1": {}, "switch_riddle": {}, "SMAX": {"scenario": "3m"},
    "HeuristicEnemySMAX": {"scenario": "3m"}, "storm": {}, "storm_2p": {}, "storm_np": {},
    "hanabi": {}, "overcooked": {}, "overcooked_v2": {}, "coin_game": {}, "jaxnav": {},
}  # fmt: skip

TINY = ["num_envs=2", "num_steps=4", "ppo.num_minibatches=2", "ppo.update_epochs=1", "hidden_size=16", "total_timesteps=16"]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ENVS))
@pytest.mark.parametrize("recurrent", [False, True], ids=["ff", "rnn"])
def test_env_trains(name, recurrent):
    cfg = load_config(None, TINY + [f"env={name}", f"recurrent={str(recurrent).lower()}", "gru_hidden_size=16"])
    env = EnvAdapter(make_env(name, ENVS[name]), name)
    trainer = make_train(cfg, env)
    state, metrics = jax.jit(trainer.train)(jax.random.PRNGKey(0))
    assert metrics["loss_total"].shape == (2,)
    assert np.all(np.isfinite(np.asarray(metrics["loss_total"])))
    for leaf in jax.tree.leaves(state.learner.params):
        assert np.all(np.isfinite(np.asarray(leaf)))
    assert int(state.learner.update) == 2
