"""dtype=bfloat16: bf16 matmul/conv operands, the MLP torsos' hidden activations in bf16 end to end,
float32 parameters, Adam state and outputs, for every network kind; float32 (the default) leaves no
bf16 anywhere."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marljax.algos.mixers import QMixer
from marljax.config import ConfigError, load_config
from marljax.nn.networks import ActorCritic, Critic, QNetwork, RecurrentActorCritic, RecurrentQNetwork
from marljax.train.wiring import make_adapter, make_trainer, warn_slow_dtype

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


# the kinds whose MLP torsos keep bf16 activations: their hidden layers' matmuls return bf16
# (ActorCritic: 2 layers x actor and critic; Critic: 2); every other matmul returns float32
BF16_HIDDEN = {"actor_critic": 4, "gaussian_cnn": 4, "critic": 2}


@pytest.mark.parametrize("kind", list(_kinds("float32")))
def test_bfloat16_casts_the_matmul_operands_and_keeps_hidden_activations_bf16(kind):
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
            returned = [str(eqn.outvars[0].aval.dtype) for eqn in dots]
            assert returned.count("bfloat16") == BF16_HIDDEN.get(kind, 0), returned  # the rest return float32
            assert set(returned) <= {"bfloat16", "float32"}
        out = jax.eval_shape(net.apply, params, *args)
        assert _float_dtypes(out) == {"float32"}  # logits, values, Q-values, GRU state


TINY = ["num_envs=2", "num_steps=8", "ppo.num_minibatches=1", "ppo.update_epochs=1", "hidden_size=16"]


def _filled(shapes, rng: np.random.Generator, scale: float = 1.0):
    """numpy arrays for a tree of shapes (nothing to compile): normal floats times `scale`, zero
    integers (action 0, Adam's step count), True masks."""

    def fill(s):
        if s.dtype == jnp.bool_:
            return np.ones(s.shape, bool)
        if jnp.issubdtype(s.dtype, jnp.integer):
            return np.zeros(s.shape, s.dtype)
        return (scale * rng.standard_normal(s.shape)).astype(s.dtype)

    return jax.tree.map(fill, shapes)


def test_bfloat16_learns_in_float32_and_its_first_loss_is_close(capsys):
    """The first PPO gradient step (value-and-grad, clipping, Adam) from the same parameters on the
    same minibatch with each dtype. Random parameters and a synthetic minibatch, not an init and a
    rollout: compiling those took more than half of this test's time."""
    env, steps = make_adapter(load_config(None, TINY)), {}
    for dtype in ("float32", "bfloat16"):
        config = load_config(None, TINY + [f"dtype={dtype}"])
        warn_slow_dtype(config)  # what prepare (train, bench, sweeps) and async runs call: a warning, not an error
        on_cpu = jax.default_backend() == "cpu"  # on a GPU or TPU bf16 is what the option is for: no warning
        assert ("warning: dtype=bfloat16 on a CPU" in capsys.readouterr().err) == (dtype == "bfloat16" and on_cpu)
        trainer = make_trainer(config, env)
        shapes = jax.eval_shape(trainer.init, jax.random.PRNGKey(0))
        steps[dtype] = next(p for p in trainer.cost_pieces(shapes) if p.name == "gradient step")
    params, opt_state, minibatch, _ = steps["float32"].args  # shapes; they do not depend on dtype
    rng = np.random.default_rng(0)
    params, minibatch = _filled(params, rng, 0.3), _filled(minibatch, rng)
    opt_state = jax.tree.map(np.zeros_like, _filled(opt_state, rng))  # Adam's fresh state: zero moments
    loss, after = {}, {}
    for dtype, step in steps.items():
        after[dtype], (parts, _) = jax.jit(step.fn)(params, opt_state, minibatch, np.float32(1e-3))
        loss[dtype] = float(parts.total)
    params, opt_state = after["bfloat16"]
    assert _float_dtypes(params) == {"float32"} and _float_dtypes(opt_state) == {"float32"}  # master weights, Adam
    assert np.isfinite(loss["bfloat16"])
    # Measured here: loss 0.6354, bf16 - f32 = -1.5e-4 (2.3e-4 relative). Whole first updates on
    # real rollouts (seeds 0-4, feed-forward and GRU) differed by at most 2.4e-4 relative: bf16 keeps
    # 8 significant bits (~4e-3 relative per operand) and the errors average out in each float32-
    # accumulated sum. The bound, 2e-3 relative, leaves ~8x that margin.
    diff = abs(loss["bfloat16"] - loss["float32"])
    assert 0 < diff < 2e-3 * abs(loss["float32"]), (loss, diff)  # > 0: the bf16 path did run


@pytest.mark.parametrize("bad, match", [
    ("dtype=float16", r"dtype: .*float32, bfloat16"),
    ("network.dtype=bfloat16", r"network\.dtype: .*core key: write dtype=float32\|bfloat16"),
])  # fmt: skip
def test_bad_dtype_is_a_config_error(bad, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, [bad])
