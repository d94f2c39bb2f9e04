"""Where a run's time goes (train/timing.py): phases are exclusive, compiles count as compile
wherever they happen, the process's start is read from /proc, and the ticker speaks while a long
step runs."""

from __future__ import annotations

import io
import time

import jax
import jax.numpy as jnp
import pytest

from marljax.train.timing import PHASES, RunClock, Ticker, process_start, time_line


def test_a_nested_phase_counts_as_itself_not_as_the_outer_one():
    clock = RunClock()
    with clock.phase("training"):
        time.sleep(0.05)
        with clock.phase("checkpoints"):
            time.sleep(0.1)
        time.sleep(0.05)
    record = clock.breakdown()
    phases = record["phases"]
    assert 0.1 <= phases["checkpoints"] < 0.2 and 0.1 <= phases["training"] < 0.2  # 0.1 each, not 0.2 for training
    assert set(phases) == set(PHASES) and phases["start-up"] == 0.0  # no `since`: counted from the clock
    assert abs(sum(phases.values()) - record["total_s"]) < 1e-2  # other is the rest of the whole
    with pytest.raises(ValueError, match="unknown phase"):
        with clock.phase("lunch"):
            pass


def test_a_compile_inside_another_phase_counts_as_compile():
    clock = RunClock().listen()
    try:
        with clock.phase("evaluation"):
            jax.jit(lambda x: jnp.sin(x) * 7.25 + 0.125)(jnp.arange(5.0)).block_until_ready()  # compiled here
    finally:
        clock.close()
    phases = clock.breakdown()["phases"]
    assert phases["compile"] > 0 and phases["evaluation"] >= 0
    unheard = RunClock()  # control: without listening, the compile stays in the phase it happened in
    with unheard.phase("evaluation"):
        jax.jit(lambda x: jnp.cos(x) * 3.5 - 0.25)(jnp.arange(5.0)).block_until_ready()
    assert unheard.breakdown()["phases"]["compile"] == 0.0


def test_start_up_is_counted_from_the_process_start():
    started = process_start()
    assert started is not None and 0 < time.time() - started < 24 * 3600  # this process began before now
    clock = RunClock(since=time.time() - 2.0)
    assert 1.9 < clock.breakdown()["phases"]["start-up"] < 2.5
    line = time_line(clock.breakdown())
    assert line.startswith("time 2.") and "whole process: start-up 2." in line


def test_the_ticker_says_what_runs_every_few_seconds_and_stops():
    out = io.StringIO()
    with Ticker("compiling", every=0.1, stream=out):
        time.sleep(0.35)
    said = out.getvalue().splitlines()
    assert 2 <= len(said) <= 4 and all(line.startswith("compiling: ") for line in said)
    time.sleep(0.2)
    assert out.getvalue().splitlines() == said  # nothing after it closed
    quiet = io.StringIO()
    with Ticker("compiling", enabled=False, every=0.05, stream=quiet):
        time.sleep(0.15)
    assert quiet.getvalue() == ""
