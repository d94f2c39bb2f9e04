"""dtype=bfloat16: bf16 matmul/conv operands with float32 accumulation, float32 parameters, Adam
state and outputs, for every network kind; float32 (the default) leaves no bf16 anywhere."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marljax.algos.mixers import QMixer
from marljax.config import ConfigError, load_config
from marljax.nn.networks import ActorCritic, Critic, QNetwork, RecurrentActorCritic, RecurrentQNetwork
from marljax.train.wiring import make_adapter, make_trainer

B, OBS, N, H = 4, 6, 5, 8
MATMULS = ("dot_general", "conv_general_dilated")


def _kinds(dtype: str) -> dict:
    """name -> (module, example inputs) for every network kind marljax builds."""
    obs, ids, h, reset = jnp.ones((B, OBS)), jnp.eye(B), jnp.zeros((B, H)), jnp.zeros(B, bool)
    return {
        "actor_critic": (ActorCritic(True, N, 8, dtype=dtype), (obs, ids)),
        "gaussian_cnn": (ActorCritic(False, 2, 8, cnn=True, dtype=dtype), (jnp.ones((B, 3, 3, 2)),)),
        "recurrent": (RecurrentActorCritic(True, N, 8, H, dtype=dtype), (h, obs, reset, ids)),
        "critic": (Critic(8, dtype=dtype), (obs,)),
        "q": (QNetwork(N, 8, dtype=dtype), (obs, ids)),
        "recurrent_q": (RecurrentQNetwork(N, 8, H, dtype=dtype), (h, obs, reset)),
        "qmix_mixer": (QMixer(8, 8, dtype=dtype), (jnp.ones((B, 3)), obs)),
    }


def _matmuls(jaxpr) -> list:
    """Every dot_general / conv equation of a jaxpr, sub-jaxprs (jit, custom_vjp, ...) included."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in MATMULS:
            found.append(eqn)
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    found += _matmuls(inner)
    return found


def _float_dtypes(tree) -> set:
    return {str(x.dtype) for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.floating)}


@pytest.mark.parametrize("kind", list(_kinds("float32")))
def test_bfloat16_casts_only_the_matmul_operands(kind):
    for dtype in ("float32", "bfloat16"):
        net, args = _kinds(dtype)[kind]
        params = jax.eval_shape(net.init, jax.random.PRNGKey(0), *args)
        assert _float_dtypes(params) == {"float32"}  # master weights
        jaxpr = jax.make_jaxpr(net.apply)(params, *args)
        dots = _matmuls(jaxpr.jaxpr)
        assert dots, "no matmul found"
        if dtype == "float32":  # the default: flax's own ops, untouched
            assert "bf16" not in str(jaxpr)
        else:
            for eqn in dots:
                assert [str(v.aval.dtype) for v in eqn.invars] == ["bfloat16", "bfloat16"], eqn
                assert str(eqn.outvars[0].aval.dtype) == "float32", eqn  # accumulated and returned in f32
        out = jax.eval_shape(net.apply, params, *args)
        assert _float_dtypes(out) == {"float32"}  # logits, values, Q-values, GRU state


TINY = ["num_envs=2", "num_steps=8", "ppo.num_minibatches=1", "ppo.update_epochs=1", "total_timesteps=16",
        "hidden_size=16", "anneal_lr=false"]  # fmt: skip


def _first_update(dtype: str):
    cfg = load_config(None, TINY + [f"dtype={dtype}"])
    trainer = make_trainer(cfg, make_adapter(cfg))
    state, metrics = jax.jit(trainer.train)(jax.random.PRNGKey(0))
    return state, float(np.asarray(metrics["loss_total"]).reshape(-1)[0])


def test_bfloat16_trains_in_float32_and_its_first_loss_is_close(capsys):
    _, loss32 = _first_update("float32")
    assert "warning" not in capsys.readouterr().err
    state16, loss16 = _first_update("bfloat16")
    assert "warning: dtype=bfloat16 on a CPU" in capsys.readouterr().err  # a warning, not an error
    # parameters and Adam's moments stay float32
    assert _float_dtypes(state16.learner.params) == {"float32"}
    assert _float_dtypes(state16.learner.opt_state) == {"float32"}
    assert np.isfinite(loss16)
    # Measured on this config (loss 2.87): bf16 - f32 = +3.4e-4, 1.2e-4 relative; over seeds 0-4, FF and
    # GRU, at most 2.4e-4 relative (bf16 keeps 8 significant bits, ~4e-3 relative per operand, and the
    # errors average out over each f32-accumulated sum). 2e-3 relative leaves ~8x that margin.
    diff = abs(loss16 - loss32)
    assert 0 < diff < 2e-3 * abs(loss32)  # > 0: the bf16 path did run


@pytest.mark.parametrize("bad, match", [
    ("dtype=float16", r"dtype: .*float32, bfloat16"),
    ("network.dtype=bfloat16", r"network\.dtype: .*core key: write dtype=float32\|bfloat16"),
])  # fmt: skip
def test_bad_dtype_is_a_config_error(bad, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, [bad])
