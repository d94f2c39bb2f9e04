"""The algorithm protocol's declarations, each with its negative control: the extra state is laid
out on the mesh from what the algorithm declares (a declaration that does not fit its state is
refused in one line), and the NaN guard watches exactly the declared losses. The last test adds
an algorithm through one registration, with nothing outside its module knowing its names."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

from marljax import schema
from marljax.algos import api, ippo, registry
from marljax.algos.qlearning import MIXER
from marljax.config import AlgorithmSchema, Supports, load_config, setting
from marljax.parallel.mesh import AGENT, DATA, SEED, build_mesh, placed_spec, shard_trainer, state_specs
from marljax.train.loop import TrainingDiverged, train
from marljax.train.metrics import first_non_finite
from marljax.train.wiring import make_adapter, make_trainer

TINY = ["num_envs=4", "num_steps=8", "total_timesteps=64", "replay.buffer_size=8", "replay.batch_size=2"]


def _trainer(algo: str, *extra: str):
    config = load_config(None, [f"algo={algo}", *TINY, *extra])
    return make_trainer(config, make_adapter(config))


def _extra_shape(trainer):
    return jax.eval_shape(trainer.init, jax.random.PRNGKey(0)).extra


def test_the_replay_family_declares_its_extra_layout_and_the_mesh_reads_only_that():
    trainer = _trainer("qmix", "recurrent=true", "param_sharing=independent")
    shape = _extra_shape(trainer)
    places = trainer.extra_places(shape)
    split = frozenset({"agents"})
    spec = lambda part: placed_spec(part, split)  # noqa: E731
    data = places.buffer.data
    # the layout the field-name matching of parallel/mesh.py gave before the protocol
    assert spec(data["obs"]["agents"]) == P(SEED, DATA, None, AGENT)
    assert spec(data["hidden"]["agents"]) == P(SEED, DATA, AGENT)
    assert spec(data["reward"]) == spec(data["world"]) == spec(places.buffer.valid) == P(SEED, DATA)
    assert spec(places.buffer.position) == P(SEED)
    assert jax.tree.leaves(jax.tree.map(spec, places.target["agents"], is_leaf=_is_placed))[0] == P(SEED, AGENT)
    assert spec(jax.tree.leaves(places.target[MIXER], is_leaf=_is_placed)[0]) == P(SEED)
    # a group that is not split stays whole on every agent device
    assert placed_spec(data["obs"]["agents"], frozenset()) == P(SEED, DATA)
    # renaming a field changes nothing outside algos/: the declaration follows the state's tree
    renamed = {"memory": shape.buffer}
    declared = {"memory": trainer.extra_layout.buffer}
    assert api.placed_leaves(declared, renamed, {"agents": 3})["memory"].data["obs"] == data["obs"]


def _is_placed(x) -> bool:
    return isinstance(x, api.Placed)


@pytest.mark.parametrize(
    "wrong, message",
    [
        # the obs' second axis is time, not the agents
        (
            lambda d: d.replace(
                buffer=d.buffer.replace(
                    data={**d.buffer.data, "obs": {"agents": api.Placed((api.ENVS, api.AGENTS), "agents")}}
                )
            ),
            r"extra\.buffer\.data\['obs'\]\['agents'\] axis 1 is declared the 3 agents",
        ),  # fmt: skip
        # a part left undeclared
        (
            lambda d: d.replace(buffer=d.buffer.replace(position=None)),
            r"extra\.buffer\.position .* has no declared layout",
        ),
        # a group the env does not have
        (lambda d: d.replace(target={"agents": api.Placed((api.AGENTS,), "adversaries")}), r"group 'adversaries'"),
        # more axes than the part has
        (lambda d: d.replace(buffer=d.buffer.replace(position=api.Placed((api.ENVS,)))), r"has 0 axes per seed"),
    ],
)
def test_an_extra_layout_that_does_not_fit_is_refused_in_one_line(wrong, message):
    trainer = _trainer("vdn")
    shape = _extra_shape(trainer)
    trainer.extra_places(shape)  # control: the algorithm's own declaration fits
    bad = dataclasses.replace(trainer, extra_layout=wrong(trainer.extra_layout))
    with pytest.raises(ValueError, match=message) as info:
        bad.extra_places(shape)
    assert "\n" not in str(info.value)


def test_sharding_refuses_a_wrong_declaration_and_a_missing_one():
    trainer = _trainer("iql")
    mesh = build_mesh(trainer.config.mesh, trainer.config.num_seeds, trainer.config.num_envs)
    wrong = trainer.extra_layout.replace(target={"agents": api.Placed((api.AGENTS, api.AGENTS), "agents")})
    with pytest.raises(ValueError, match=r"extra\.target\['agents'\].* axis 1 is declared the 3 agents"):
        shard_trainer(dataclasses.replace(trainer, extra_layout=wrong), mesh)
    state = jax.eval_shape(jax.vmap(trainer.init), jax.ShapeDtypeStruct((2, 2), jnp.uint32))
    with pytest.raises(ValueError, match="no declared layout"):
        state_specs(state, frozenset())  # extra leaves, no declaration
    assert state_specs(state, frozenset(), trainer.extra_places(state.extra, lead=1)).extra.buffer.valid == P(
        SEED, DATA
    )


def test_the_nan_guard_watches_exactly_the_declared_losses():
    row = {"loss_total": 1.0, "q_mean": float("nan"), "loss_weird": float("inf"), "epsilon": float("nan")}
    assert first_non_finite(row, ("loss_total",)) is None  # undeclared metrics may be NaN
    assert first_non_finite(row, ("loss_total", "q_mean")) == "q_mean"  # a declared one may not
    assert first_non_finite({**row, "loss_total": float("nan")}, ("loss_total", "q_mean")) == "loss_total"
    # no prefix matching: a loss_ metric nobody declares is not watched
    every = [key for name in registry.names() for key in registry.get(name).losses]
    assert first_non_finite({"loss_weird": float("nan"), "epsilon": float("nan")}, every) is None
    assert registry.get("ippo").losses[0] == registry.get("iql").losses[0] == "loss_total"
    assert _trainer("iql").losses == registry.get("iql").losses


# --------------------------------------------------------------- an algorithm added by registration
@dataclasses.dataclass(frozen=True)
class ProbeConfig:
    """`probe.*`: which metric the probe algorithm's learn makes NaN."""

    poison: str = setting(
        "none", "metric made NaN: none | surprise | loss_total", choices=("none", "surprise", "loss_total")
    )


def _build_probe(config, env, **kwargs) -> api.Algorithm:
    """IPPO's pieces, whose learn also reports `surprise` (not declared a loss) and, as asked,
    makes it or the declared `loss_total` NaN."""
    pieces = ippo.build(config, env, **kwargs)
    poison = config.section(ProbeConfig).poison

    def learn(learner, extra, batch, key):
        learner, extra, metrics = pieces.learn(learner, extra, batch, key)
        nan = jnp.float32(jnp.nan)
        values = {**metrics.values, "surprise": nan if poison == "surprise" else jnp.float32(0)}
        values = {**values, "loss_total": nan} if poison == "loss_total" else values
        return learner, extra, metrics.replace(values=values)

    return dataclasses.replace(pieces, learn=learn)


PROBE = api.AlgorithmSpec(
    AlgorithmSchema(
        "probe_nan",
        "IPPO reporting an undeclared metric (a test)",
        {"ppo": ippo.PPOConfig, "probe": ProbeConfig},
        supports=Supports(actions=("discrete", "continuous")),
    ),  # fmt: skip
    _build_probe,
    ippo.LOSSES,
)


@pytest.mark.slow
def test_an_algorithm_added_by_one_registration_runs_and_its_declared_losses_guard_it(tmp_path, monkeypatch):
    # the registries as they are, restored after the test: the probe must not reach the tests that list
    # every algorithm (an xdist worker runs them after this one in the same process)
    monkeypatch.setattr(registry, "_SPECS", dict(registry._SPECS))
    monkeypatch.setattr(schema, "_SCHEMAS", dict(schema._SCHEMAS))
    registry.register(PROBE)  # the one line: nothing else in marljax learns of it
    base = ["algo=probe_nan", *TINY[:3], "num_chunks=2", "progress=false", "plot=false", "eval_every=0"]
    result = train(load_config(None, [*base, "probe.poison=surprise", f"out_dir={tmp_path / 'a'}"]), log=lambda s: None)
    assert result.rows[-1]["update"] == 2 and result.rows[-1]["surprise"] != result.rows[-1]["surprise"]  # NaN, kept
    with pytest.raises(TrainingDiverged, match="update 1: loss_total is nan"):  # control: a declared loss trips it
        train(load_config(None, [*base, "probe.poison=loss_total", f"out_dir={tmp_path / 'b'}"]), log=lambda s: None)
