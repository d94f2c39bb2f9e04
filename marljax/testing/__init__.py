"""Fixtures for marljax's own tests and benchmarks, not the API: nothing here trains anything.

    host_spread.py     a numpy PettingZoo env (cooperative navigation) with a set host cost per step:
                       `env=pettingzoo:marljax.testing.host_spread:parallel_env`
    host_straggler.py  host_spread where 1 copy in `slow_every` is `slow_factor` times slower
                       (`marljax bench stragglers`)
    host_bound.py      MPE simple_spread whose every step calls back to the host and sleeps:
                       `env=marljax.testing.host_bound:make_env`
    faults.py          SIGKILL a `marljax train` child process, resume it, compare it bit for bit
                       with an uninterrupted run (tests/test_sigkill.py, experiments/kill_resume.py)

They ship with the package because the benchmarks and the README's async examples name these envs
(a user can rerun a figure); the tests' own fixtures that nothing else needs live in tests/.
Nothing else in marljax imports this package.
"""
