"""How a trained RobotWarehouse team earns its reward: deliveries by carrying, or by parking on the goals.

Jumanji's RobotWarehouse scans its two goals in turn, and the second goal's delivery draws the new
request from the shelves not requested, which by then include the shelf the first goal just
delivered. Two agents that stay on both goals holding shelves can thus be paid again for the same
shelves, every step when the request queue is one short of the shelves. This script plays an
exported policy greedily and counts the deliveries, and those paid while every agent on a goal had
already stood there the step before (a carrying delivery arrives on the goal in that step).

    marljax export RUN_DIR POLICY_DIR
    python experiments/warehouse_deliveries.py POLICY_DIR [--episodes 10]
"""

from __future__ import annotations

import argparse

import jax
import numpy as np

import marljax


def _cells(state) -> set[tuple[int, int]]:
    pos = state.env.agents.position  # x: row, y: column, one entry per agent
    return {(int(r), int(c)) for r, c in zip(np.asarray(pos.x), np.asarray(pos.y))}


def count(policy_dir: str, episodes: int) -> tuple[float, float]:
    """(deliveries, of them by agents that stayed on their goals) per episode, greedy, keys 1000+i."""
    policy = marljax.load_policy(policy_dir)
    if policy.config.env != "jumanji:RobotWarehouse-v0":
        raise SystemExit(f"{policy_dir}: a policy for {policy.config.env}, not jumanji:RobotWarehouse-v0")
    env = policy.env.env  # the JaxMARL-API view of the Jumanji env
    goals = {(int(row), int(col)) for col, row in np.asarray(env.env.goals)}  # Jumanji stores (column, row)
    act = jax.jit(lambda obs, key, avail: policy.act(obs, key, None, avail, greedy=True)[0])
    step = jax.jit(env.step)
    total = parked = 0.0
    for episode in range(episodes):
        key = jax.random.PRNGKey(1000 + episode)
        obs, state = env.reset(key)
        for _ in range(env.time_limit - 1):  # the last step resets the episode: positions jump
            key, act_key, step_key = jax.random.split(key, 3)
            before = _cells(state) & goals
            obs, state, reward, _, _ = step(step_key, state, act(obs, act_key, env.get_avail_actions(state)))
            paid = float(reward[env.agents[0]])  # shared
            on_goal = _cells(state) & goals
            total += paid
            if paid and on_goal and on_goal <= before:
                parked += paid
    return total / episodes, parked / episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("policy_dir")
    parser.add_argument("--episodes", type=int, default=10)
    args = parser.parse_args()
    total, parked = count(args.policy_dir, args.episodes)
    print(f"deliveries per episode {total:.2f}, of them by agents that stayed on their goals {parked:.2f}")


if __name__ == "__main__":
    main()
