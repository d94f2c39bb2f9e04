"""The offline algorithms learn from their data (nightly), on seeds nobody tuned on: IPPO trained on MPE
simple_spread (seed 7) makes a Medium dataset (its policy with epsilon 0.4) and random play a Poor one
(100k transitions each, as docs/guide/offline.md's table, whose runs used seed 0); each offline
algorithm then learns from them (seeds 11 and 12, the defaults: 20k gradient steps) and is evaluated
greedily online on 256 episodes per seed. The claims, stated beside the figures in the docs:

* on Medium, bc reaches the dataset's mean episode return, iql_cql and maicq exceed it by MARGIN;
* on Poor (random play), iql_cql and maicq exceed the dataset's mean by MARGIN (cloning random play
  does not, and is not asked to).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("flashbax")

from marljax.config import load_config  # noqa: E402
from marljax.run_settings import RecordSettings  # noqa: E402
from marljax.train.loop import train  # noqa: E402
from marljax.train.record import record  # noqa: E402

pytestmark = [pytest.mark.nightly, pytest.mark.optimized, pytest.mark.timeout(3600)]

MARGIN = 0.5  # per agent, over the dataset's mean episode return
QUIET = ["progress=false", "plot=false"]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("offline_learn")
    train(load_config(None, ["total_timesteps=2e6", "seed=7", f"out_dir={root / 'ippo'}", *QUIET]), log=lambda _: None)
    medium = record(root / "ippo", root / "spread.vlt", RecordSettings(epsilon=0.4, seed=7), log=lambda _: None)
    poor = record("random", root / "spread.vlt", RecordSettings(seed=7), log=lambda _: None)
    return {"Medium": medium, "Poor": poor}


@pytest.mark.parametrize(
    "algo, quality, margin",
    [("bc", "Medium", 0.0), ("iql_cql", "Medium", MARGIN), ("maicq", "Medium", MARGIN), ("iql_cql", "Poor", MARGIN),
     ("maicq", "Poor", MARGIN)],
)  # fmt: skip
def test_an_offline_algorithm_reaches_or_beats_its_data(datasets, algo, quality, margin, tmp_path):
    path = datasets[quality]
    data_mean = json.loads((path / "marljax.json").read_text())["returns"]["mean"]
    config = load_config(None, [f"algo={algo}", f"offline.dataset={path}", "seed=11", "num_seeds=2",
                                "eval_episodes=256", f"out_dir={tmp_path / 'run'}", *QUIET])  # fmt: skip
    final = train(config, log=lambda _: None).rows[-1]["eval_return"]
    print(f"{algo} on {quality} (data {data_mean:.2f} per agent): greedy {final:.2f}")
    assert final >= data_mean + margin, (
        f"{algo} on the {quality} dataset: {final:.2f} per agent after its 20k gradient steps, the data's "
        f"mean {data_mean:.2f}; needs +{margin}"
    )
