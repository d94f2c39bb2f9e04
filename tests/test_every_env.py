"""Every JaxMARL env that imports from the PyPI package runs: two tiny IPPO updates, finite losses and
parameters, with the GRU network on every env and the feed-forward one on one env of each family
(the env's side, its adapter, spaces and masks, is the same for both networks; each case is a
compile of 10-40 s on 2 cores). That envs *learn* is shown per family in test_learns.py."""

import jax
import numpy as np
import pytest

from marljax.algos.ippo import SPEC
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

# feed-forward on one env per family (MPE: spread; the Box-action MPE envs: facmac; SMAX; STORM; ...)
FF_ENVS = {"MPE_simple_spread_v3", "MPE_simple_facmac_v1", "HeuristicEnemySMAX", "storm", "hanabi", "overcooked",
           "overcooked_v2", "coin_game", "switch_riddle", "jaxnav"}  # fmt: skip
CASES = [(name, recurrent) for name in sorted(ENVS) for recurrent in (False, True) if recurrent or name in FF_ENVS]
# nightly: cases whose code CI runs elsewhere. The 3-, 6- and 9-agent facmac maps are simple_facmac_v1's
# scenario with more agents; feed-forward spread and HeuristicEnemySMAX train in other CI tests
# (test_defaults_learn, test_checkpoint's export and test_win_rate)
NIGHTLY = {("MPE_simple_facmac_3a_v1", True), ("MPE_simple_facmac_6a_v1", True), ("MPE_simple_facmac_9a_v1", True),
           ("MPE_simple_spread_v3", False), ("HeuristicEnemySMAX", False)}  # fmt: skip
PARAMS = [pytest.param(n, r, id=f"{'rnn' if r else 'ff'}-{n}", marks=pytest.mark.nightly if (n, r) in NIGHTLY else ())
          for n, r in CASES]  # fmt: skip

# A smoke run is all compile (2 updates of 2 envs x 4 steps): LLVM's optimisations, which only
# speed up the generated code, are off. Measured: a case compiles in ~60% of the time.
SMOKE_COMPILE = {"xla_backend_optimization_level": 0}

TINY = [
    "num_envs=2",
    "num_steps=4",
    "ppo.num_minibatches=2",
    "ppo.update_epochs=1",
    "hidden_size=16",
    "total_timesteps=16",
]


@pytest.mark.slow
@pytest.mark.parametrize("name, recurrent", PARAMS)
def test_env_trains(name, recurrent):
    cfg = load_config(None, TINY + [f"env={name}", f"recurrent={str(recurrent).lower()}", "gru_hidden_size=16"])
    env = EnvAdapter(make_env(name, ENVS[name]), name)
    trainer = SPEC.make_train(cfg, env)
    state, metrics = jax.jit(trainer.train, compiler_options=SMOKE_COMPILE)(jax.random.PRNGKey(0))
    assert metrics["loss_total"].shape == (2,)
    assert np.all(np.isfinite(np.asarray(metrics["loss_total"])))
    for leaf in jax.tree.leaves(state.learner.params):
        assert np.all(np.isfinite(np.asarray(leaf)))
    assert int(state.learner.update) == 2
