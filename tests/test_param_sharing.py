"""param_sharing = shared | per_role | independent: parameter-tree shapes and training (learning with one
network per role: tests/test_learns.py, speaker-listener)."""

import jax
import numpy as np
import pytest

from marljax.algos.ippo import SPEC
from marljax.config import ConfigError, load_config
from marljax.train.wiring import make_adapter

TINY = [
    "num_envs=2",
    "num_steps=4",
    "ppo.num_minibatches=2",
    "ppo.update_epochs=1",
    "total_timesteps=16",
    "hidden_size=8",
]


def _trainer(*overrides):
    cfg = load_config(None, TINY + list(overrides))
    return SPEC.make_train(cfg, make_adapter(cfg))


def _first_kernels(trainer):
    """group -> shape of the actor's first Dense kernel (leading axis: parameter sets)."""
    params = jax.eval_shape(trainer.init, jax.random.PRNGKey(0)).learner.params
    return {g: p["params"]["actor"]["Dense_0"]["kernel"].shape for g, p in params.items()}


# MPE_simple_facmac_v1: 3 adversaries + 1 good agent, all with obs (16,) and Box(5) actions.
FACMAC = "env=MPE_simple_facmac_v1"


def test_shared_one_set_for_all_agents_with_identical_spaces():
    # one group of 4; one parameter set; obs 16 + one-hot id 4
    assert _first_kernels(_trainer(FACMAC, "param_sharing=shared")) == {"agents": (1, 20, 8)}


def test_per_role_one_set_per_agent_class():
    kernels = _first_kernels(_trainer(FACMAC, "param_sharing=per_role"))
    assert kernels == {"adversaries": (1, 19, 8), "agents": (1, 16, 8)}  # id only where >1 agent


def test_independent_one_set_per_agent_without_ids():
    assert _first_kernels(_trainer(FACMAC, "param_sharing=independent")) == {"agents": (4, 16, 8)}


def test_heterogeneous_spaces_never_share_or_pad():
    # speaker obs (3,) Discrete(3); listener obs (11,) Discrete(5): separate networks in every mode
    for mode in ("shared", "per_role", "independent"):
        kernels = _first_kernels(_trainer("env=MPE_simple_speaker_listener_v4", f"param_sharing={mode}"))
        assert kernels == {"speaker": (1, 3, 8), "listener": (1, 11, 8)}, mode


def test_independent_parameter_sets_differ_and_train_separately():
    trainer = _trainer("env=MPE_simple_spread_v3", "env_kwargs.num_agents=4", "env_kwargs.num_landmarks=4",
                       "param_sharing=independent")  # fmt: skip
    state, metrics = jax.jit(trainer.train)(jax.random.PRNGKey(0))
    kernel = np.asarray(state.learner.params["agents"]["params"]["actor"]["Dense_0"]["kernel"])
    assert kernel.shape[0] == 4
    assert not np.allclose(kernel[0], kernel[1])
    assert np.all(np.isfinite(np.asarray(metrics["loss_total"])))


@pytest.mark.parametrize("mode", ["per_role", "independent"])
def test_recurrent_sharing_modes_train(mode):
    trainer = _trainer("env=MPE_simple_adversary_v3", f"param_sharing={mode}", "recurrent=true", "gru_hidden_size=8")
    state, metrics = jax.jit(trainer.train)(jax.random.PRNGKey(0))
    assert np.all(np.isfinite(np.asarray(metrics["loss_total"])))
    pair = next(g.name for g in trainer.env.groups if g.size == 2)  # the two good agents
    assert state.learner.params[pair]["params"]["gru"]["hr"]["kernel"].shape[0] == (2 if mode == "independent" else 1)


def test_unknown_sharing_mode_is_a_config_error():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["param_sharing=per_agent"])
    assert err.value.field == "param_sharing" and "independent" in str(err.value)
