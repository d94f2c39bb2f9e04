"""Benchmarks: each prints its figures as a table (`table.py`), then, LAST, one JSON line.

    train.py       `marljax bench` (= `marljax bench throughput`): training and env-only throughput, FLOPs from the algorithm's
                   cost pieces, MFU against a measured matmul peak, compile time, memory
    env_only.py    the rollout ceiling: the same environments stepped with random actions
    swap.py        the agent-parallel swap between learning and acting layouts (mesh.agent > 1)
    pipeline.py    `marljax bench mode=async`: generation, learning, the sync (same threads) and async loops
    agents.py      `marljax bench agents`: learner bytes per device, swap and update time over agent count
                   N and mesh.agent K, and the largest N whose learner state fits a device budget
    stragglers.py  `marljax bench stragglers`: host env copies with a 10x straggler, per host_stepping
    balance.py     `marljax bench balance`: dropped batches with async.balance=off and rate
    target.py      `marljax bench target`: wall-clock time (compile included) until the training
                   return first reaches a target, stopping the run there
    checkpoint.py  `marljax bench checkpoint`: periodic checkpoints vs only the final one
    sweep.py       `marljax bench sweep`: one vmapped sweep program vs its runs one by one
    measure.py     timing, XLA's FLOP count, the matmul peak, peak memory
    table.py       the one table printer, and the JSON line after it

Each command is declared in marljax/cli.py's BENCHES (its name, arguments, summary, help).
"""
