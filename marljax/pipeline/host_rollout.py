"""Rollouts of host-side (PettingZoo) environments in an actor thread, as the learner expects them.

The policy runs jitted on the actor's device once per step for every env copy and seed
(`Trainer.policy_step`, vmapped over seeds); the copies step on the host. The result is a
`Trajectory` shaped exactly like a JAX env's `collect` output ([S, T, E, A_g, ...] leaves),
so the learner cannot tell the two apart.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np

from marljax.parallel.placement import place
from marljax.pipeline.processes import host_seed_base
from marljax.pipeline.settings import HostRunSettings
from marljax.types import EpisodeStats, GroupBatch, Trajectory


class HostCollector:
    beat: Callable[[str], None] = staticmethod(lambda what: None)  # set by the actor thread (watchdog.py)

    def __init__(
        self,
        run: HostRunSettings,
        adapter,
        policy_step,
        device,
        keys: jax.Array,
        thread_index: int,
        share: tuple[int, int] = (0, 1),
    ):
        """policy_step: jitted, seed-vmapped `Trainer.policy_step`, built once and shared by threads
        (a jit wrapper made per thread would compile again in each one). share: (p, P), this
        process's slice of num_envs (processes.env_share)."""
        self.run, self.adapter, self.device = run, adapter, device
        S, E = run.num_seeds, run.num_envs // share[1]
        self.S, self.E, self.T = S, E, run.num_steps
        self.venv = adapter.vector(S * E, seed=host_seed_base(run, thread_index, share))
        self.obs = self._split(self.venv.reset())
        groups = adapter.groups
        self.reset = {g.name: np.ones((S, E, g.size), bool) for g in groups}
        self.rnn = run.recurrent
        self.hidden = (
            {g.name: np.zeros((S, E, g.size, run.gru_hidden_size), np.float32) for g in groups} if self.rnn else {}
        )
        self.ep_return = np.zeros((S * E, adapter.num_agents), np.float32)
        self.ep_length = np.zeros(S * E, np.int64)
        self.keys = keys  # [S, 2] on `device`
        self.step_fn = policy_step

    def _split(self, tree: dict) -> dict:
        """group -> [S*E, ...] -> [S, E, ...]"""
        return {k: v.reshape((self.S, self.E) + v.shape[1:]) for k, v in tree.items()}

    def _policy(self, params, key):
        put = lambda x: place(x, self.device)  # noqa: E731
        out = self.step_fn(params, put(self.obs), put(self.reset), put(self.hidden), key)
        return jax.device_get(out)

    def collect(self, params, ticket: int, version: int = 0, min_version: int = 0) -> tuple[Trajectory, int]:
        """(the rollout of batch `ticket`, every step with `params`, their version)."""
        groups, S, E, T = self.adapter.groups, self.S, self.E, self.T
        key = _fold(self.keys, ticket)
        steps: dict[str, dict[str, list[np.ndarray]]] = {  # group -> field -> its T steps
            g.name: {f: [] for f in ("obs", "action", "logp", "value", "reward", "done", "reset", "hidden")}
            for g in groups
        }
        return_sum = np.zeros((S, self.adapter.num_agents), np.float32)
        length_sum, count = np.zeros(S, np.float32), np.zeros(S, np.float32)
        for t in range(T):
            out = self._policy(params, _fold(key, t))
            actions = {
                g.name: np.asarray(out[g.name][0]).reshape((S * E,) + np.shape(out[g.name][0])[2:]) for g in groups
            }
            obs, reward, done, ep_done = self.venv.step(
                actions,
                on_copy=lambda e: self.beat(f"env.step of host env copy {e} (step {t} of batch {ticket})"),  # noqa: B023 (called within this step)
            )
            reward, done = self._split(reward), self._split(done)
            for g in groups:
                rec = steps[g.name]
                action, logp, value, h = out[g.name]
                rec["obs"].append(self.obs[g.name])
                rec["action"].append(np.asarray(action))
                rec["logp"].append(np.asarray(logp))
                rec["value"].append(np.asarray(value))
                rec["reward"].append(reward[g.name])
                rec["done"].append(done[g.name])
                if self.rnn:
                    rec["reset"].append(self.reset[g.name])
                    rec["hidden"].append(self.hidden[g.name])
                    self.hidden[g.name] = np.asarray(h)
            # episode statistics, per seed
            reward_all = np.concatenate([reward[g.name].reshape(S * E, -1) for g in groups], axis=1)  # [S*E, N]
            self.ep_return += reward_all
            self.ep_length += 1
            fin = ep_done.reshape(S, E)
            return_sum += np.einsum("se,sen->sn", fin.astype(np.float32), self.ep_return.reshape(S, E, -1))
            length_sum += (fin * self.ep_length.reshape(S, E)).sum(axis=1)
            count += fin.sum(axis=1)
            self.ep_return[ep_done] = 0.0
            self.ep_length[ep_done] = 0
            self.obs = self._split(obs)
            self.reset = done
        last = self._policy(params, _fold(key, T))
        stack = lambda xs: np.stack(xs, axis=1)  # noqa: E731  [S, T, E, ...]
        batch = {
            g.name: GroupBatch(
                obs=stack(steps[g.name]["obs"]),
                action=stack(steps[g.name]["action"]),
                logp=stack(steps[g.name]["logp"]),
                value=stack(steps[g.name]["value"]),
                reward=stack(steps[g.name]["reward"]),
                done=stack(steps[g.name]["done"]),
                mask=None,
                reset=stack(steps[g.name]["reset"]) if self.rnn else None,
                hidden=stack(steps[g.name]["hidden"]) if self.rnn else None,
                world=None,
            )
            for g in groups
        }
        last_value = {g.name: np.asarray(last[g.name][2]) for g in groups}
        stats = EpisodeStats(return_sum, length_sum, count, np.zeros(S, np.float32))  # host envs: no win condition
        return Trajectory(batch, last_value, stats), version


_fold = jax.jit(jax.vmap(jax.random.fold_in, (0, None)))  # [S, 2] keys, one int -> [S, 2]
