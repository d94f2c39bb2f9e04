"""Regression: vmapping init over seeds must not hang (batched LAPACK QR in orthogonal init).

jaxlib's CPU QR kernel, batched over seeds, could wait forever for work it handed to XLA's
thread pool. `networks.orthogonal` keeps the QR unbatched. Run in a subprocess with a timeout so
a regression fails instead of hanging the suite.
"""

import subprocess
import sys

import pytest

CODE = """
import jax
from marljax.config import load_config
from marljax.envs import EnvAdapter, make_env
from marljax.algos.ippo import SPEC
for recurrent in ("true", "false"):
    cfg = load_config(None, ["num_envs=16", "num_steps=32", "total_timesteps=4096", f"recurrent={recurrent}"])
    trainer = SPEC.make_train(cfg, EnvAdapter(make_env(cfg.env), cfg.env))
    for _ in range(3):
        state = jax.jit(jax.vmap(trainer.init))(jax.random.split(jax.random.PRNGKey(0), 4))
        jax.block_until_ready(state)
print("done")
"""


@pytest.mark.slow
def test_vmapped_init_over_seeds_completes():
    proc = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("done")


def test_orthogonal_init_is_orthogonal_under_vmap():
    import jax
    import jax.numpy as jnp

    from marljax.nn.networks import orthogonal

    w = jax.vmap(lambda k: orthogonal(2.0)(k, (16, 16)))(jax.random.split(jax.random.PRNGKey(1), 3))
    assert w.shape == (3, 16, 16)
    for m in w:
        assert jnp.allclose(m.T @ m, 4.0 * jnp.eye(16), atol=1e-4)
    assert not jnp.allclose(w[0], w[1])
