"""Config parsing and validation: every error names its field, before anything compiles."""

from __future__ import annotations

import dataclasses

import pytest

from marljax.algos.ippo import PPOConfig
from marljax.algos.pqn_vdn import PQNConfig
from marljax.algos.q_acting import QConfig
from marljax.algos.qlearning import ReplayConfig
from marljax.config import Config, ConfigError, MeshConfig, from_dict, load_config, parse_overrides, replace
from marljax.envs.kwargs_used import parse_source
from marljax.envs.registry import check_env_name
from marljax.parallel.mesh import resolve_mesh_shape
from marljax.sweeps.spec import load_sweep


def _mesh_shape(config, n_devices: int) -> tuple[int, int, int]:
    return resolve_mesh_shape(config.mesh, config.num_seeds, config.num_envs, n_devices)


def _error(overrides, path=None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    return info.value


# ------------------------------------------------------------------ errors, one per class
def test_unknown_key_did_you_mean():
    err = _error(["lrr=1"])
    assert err.field == "lrr"
    assert "unknown key" in str(err)
    assert "did you mean 'lr'" in str(err)


def test_unknown_nested_key_did_you_mean():
    err = _error(["mesh.dta=4"])
    assert err.field == "mesh.dta"
    assert "did you mean 'mesh.data'" in str(err)


def test_wrong_type():
    err = _error(["num_envs=abc"])
    assert err.field == "num_envs"
    assert "integer" in str(err) and "abc" in str(err)
    err = _error(["anneal_lr=maybe"])
    assert err.field == "anneal_lr"
    err = _error(["lr=fast"])
    assert err.field == "lr"


def test_non_integer_float_for_int_field():
    err = _error(["num_envs=2.5"])
    assert err.field == "num_envs"


def test_non_positive_count():
    err = _error(["num_envs=0"])
    assert err.field == "num_envs"
    assert "must be >= 1" in str(err)  # the allowed range, from the field's declared minimum
    assert _error(["num_steps=-8"]).field == "num_steps"


def test_minibatches_must_divide_num_steps():
    err = _error(["num_steps=10", "ppo.num_minibatches=4"])
    assert err.field == "ppo.num_minibatches"
    assert "num_steps=10" in str(err)
    assert "1, 2, 5, 10" in str(err)  # the allowed values
    err = _error(["algo=pqn_vdn", "num_steps=10", "pqn.num_minibatches=4"])  # PQN-VDN's own section
    assert err.field == "pqn.num_minibatches" and "1, 2, 5, 10" in str(err)


def test_mesh_data_must_divide_num_envs():
    err = _error(["num_envs=6", "mesh.data=4"])
    assert err.field == "mesh.data"
    assert "num_envs=6" in str(err)


def test_mesh_seed_must_divide_num_seeds():
    err = _error(["num_seeds=3", "mesh.seed=2", "mesh.data=1"])
    assert err.field == "mesh.seed"


def test_mesh_bad_axis_values():
    assert _error(["mesh.data=0"]).field == "mesh.data"
    assert _error(["mesh.seed=-1", "mesh.data=-1"]).field == "mesh"


def test_mesh_sizes_must_match_device_count():
    config = load_config(None, ["mesh.seed=3", "mesh.data=3", "num_seeds=3", "num_envs=3"])
    with pytest.raises(ConfigError) as info:
        _mesh_shape(config, n_devices=8)
    assert info.value.field == "mesh"
    assert "8" in str(info.value) and "9" in str(info.value)

    # -1 fills the axis, but only when the other axis divides the device count
    config = load_config(None, ["mesh.seed=-1", "mesh.data=3", "num_envs=3"])
    with pytest.raises(ConfigError) as info:
        _mesh_shape(config, n_devices=8)
    assert info.value.field == "mesh.data"

    config = load_config(None, ["mesh.seed=3", "mesh.data=-1", "num_seeds=3"])
    with pytest.raises(ConfigError) as info:
        _mesh_shape(config, n_devices=8)
    assert info.value.field == "mesh.seed"

    # num_envs must split over the filled data axis
    config = load_config(None, ["mesh.seed=1", "mesh.data=-1", "num_envs=6"])
    with pytest.raises(ConfigError) as info:
        _mesh_shape(config, n_devices=4)
    assert info.value.field == "mesh.data"

    # and good shapes resolve
    assert _mesh_shape(load_config(None, ["mesh.seed=2", "num_seeds=2"]), n_devices=8) == (2, 4, 1)
    assert _mesh_shape(load_config(None, []), n_devices=8) == (1, 8, 1)
    assert _mesh_shape(load_config(None, ["mesh.data=2", "mesh.seed=-1", "num_seeds=4"]), n_devices=8) == (
        4,
        2,
        1,
    )
    # mesh.agent is fixed; -1 fills what it leaves
    agent2 = ["param_sharing=independent", "mesh.agent=2", "mesh.seed=2", "num_seeds=2"]
    assert _mesh_shape(load_config(None, agent2), n_devices=8) == (2, 2, 2)
    with pytest.raises(ConfigError) as info:
        _mesh_shape(load_config(None, ["param_sharing=independent", "mesh.agent=3"]), n_devices=8)
    assert info.value.field == "mesh.agent"


def test_unknown_env_name():
    with pytest.raises(ConfigError) as info:
        check_env_name("MPE_simple_sprad_v3")
    assert info.value.field == "env"
    assert "did you mean 'MPE_simple_spread_v3'" in str(info.value)

    from marljax.train.wiring import prepare

    config = load_config(None, ["env=not_a_real_env", "num_envs=2", "num_steps=4", "total_timesteps=8"])
    with pytest.raises(ConfigError) as info:
        prepare(config)
    assert info.value.field == "env"
    assert "not_a_real_env" in str(info.value)


def test_total_timesteps_smaller_than_one_update():
    err = _error(["num_envs=4", "num_steps=8", "total_timesteps=16"])
    assert err.field == "total_timesteps"
    assert "32" in str(err)


@pytest.mark.parametrize("field, value", [("gamma", "1.5"), ("gamma", "-0.1"), ("ppo.gae_lambda", "2")])
def test_unit_interval_fields(field, value):
    err = _error([f"{field}={value}"])
    assert err.field == field
    assert "[0, 1]" in str(err)


def test_negative_or_zero_floats():
    assert _error(["lr=0"]).field == "lr"
    assert _error(["ppo.ent_coef=-1"]).field == "ppo.ent_coef"
    assert _error(["max_grad_norm=inf"]).field == "max_grad_norm"
    err = _error(["max_grad_norm=0"])  # 0 would clip every gradient to nothing
    assert err.field == "max_grad_norm" and "must be > 0" in str(err)


@pytest.mark.parametrize(
    "field, value, allowed",
    [("algo", "ipo", "ippo"), ("activation", "gelu", "tanh"), ("torso", "transformer", "cnn")],
)
def test_bad_choice(field, value, allowed):
    err = _error([f"{field}={value}"])
    assert err.field == field
    assert value in str(err) and allowed in str(err)


def test_activation_did_you_mean():
    assert "did you mean 'relu'" in str(_error(["activation=rellu"]))


def test_override_without_equals():
    err = _error(["lr"])
    assert "key=value" in str(err)


def test_a_value_yaml_cannot_read_is_refused_naming_its_key(tmp_path):
    """A value with spaces given unquoted (the shell splits `map_params={map_size: [7, 7]}`), on the
    command line, in a config file's number field and in a sweep's values: one line naming the key,
    where PyYAML's ParserError named nothing. Control: the same value quoted as one argument loads."""
    err = _error(["env=jaxnav", "env_kwargs.map_params={map_size:", "[7,", "7]}"])
    assert err.field == "env_kwargs.map_params" and "\n" not in str(err), str(err)
    assert "quote the whole key=value" in str(err)
    loaded = load_config(None, ["env=jaxnav", "env_kwargs.map_params={map_size: [7, 7]}"])
    assert loaded.env_kwargs["map_params"] == {"map_size": [7, 7]}
    path = tmp_path / "run.yaml"
    path.write_text("lr: '[1e-3'\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, [])
    assert info.value.field == "lr" and "\n" not in str(info.value), str(info.value)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("axes:\n  lr: ['{1e-3', 2e-3]\n")
    with pytest.raises(ConfigError) as info:
        load_sweep(sweep)
    assert info.value.field == "axes.lr" and "\n" not in str(info.value), str(info.value)


# ------------------------------------------------------------------ parsing
def test_scientific_notation_for_int():
    config = load_config(None, ["total_timesteps=2e6"])
    assert config.total_timesteps == 2_000_000
    assert type(config.total_timesteps) is int
    assert type(load_config(None, ["lr=3e-4"]).lr) is float
    assert load_config(None, ["lr=3e-4"]).lr == pytest.approx(3e-4)


def test_nested_overrides():
    config = load_config(None, ["mesh.data=4", "env_kwargs.scenario=3m", "env=HeuristicEnemySMAX"])
    assert config.mesh == MeshConfig(seed=1, data=4)
    assert config.env_kwargs == {"scenario": "3m"}
    assert isinstance(config.env_kwargs["scenario"], str)
    assert parse_overrides(["mesh.data=4", "a.b.c=x"]) == {"mesh": {"data": 4}, "a": {"b": {"c": "x"}}}


def test_yaml_file_and_overrides_merge(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(
        "lr: 0.01\n"
        "num_envs: 8\n"
        "total_timesteps: 2e6\n"  # YAML reads this as a string; it still becomes an int
        "recurrent: true\n"
        "mesh:\n  seed: 1\n  data: 2\n"
        "env_kwargs:\n  a: 1\n"
    )
    config = load_config(path, ["mesh.data=4", "env_kwargs.b=2", "lr=0.02"])
    assert config.lr == pytest.approx(0.02)
    assert config.num_envs == 8
    assert config.total_timesteps == 2_000_000 and type(config.total_timesteps) is int
    assert config.recurrent is True
    assert config.mesh == MeshConfig(seed=1, data=4)
    assert config.env_kwargs == {"a": 1, "b": 2}
    # untouched fields keep their defaults
    assert config.gamma == Config().gamma


def test_yaml_file_errors(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "missing.yaml")
    assert "missing.yaml" in str(info.value)
    bad = tmp_path / "bad.yaml"
    bad.write_text("lrr: 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    assert info.value.field == "lrr"
    notmap = tmp_path / "list.yaml"
    notmap.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError):
        load_config(notmap)


def test_config_is_frozen():
    config = load_config(None, [])
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.lr = 1.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.mesh.data = 2  # type: ignore[misc]


def test_replace_and_round_trip():
    config = load_config(None, ["num_envs=8", "mesh.data=2"])
    changed = replace(config, num_envs=16)
    assert changed.num_envs == 16 and config.num_envs == 8
    assert changed.mesh.data == 2
    with pytest.raises(ConfigError) as info:
        replace(config, num_envs=3)  # mesh.data=2 no longer divides it
    assert info.value.field == "mesh.data"
    assert from_dict(config.to_dict()) == config


def test_derived_values():
    config = load_config(None, ["num_envs=4", "num_steps=8", "total_timesteps=256", "num_chunks=2", "num_seeds=2"])
    assert config.num_updates == 8
    assert config.updates_per_chunk == 4
    assert config.env_steps_per_update == 8 * 4 * 2
    assert config.section(PPOConfig).minibatch_steps(config) == 8 // config.section(PPOConfig).num_minibatches == 2
    pqn = load_config(None, ["algo=pqn_vdn", "num_steps=8", "pqn.num_minibatches=2"])
    assert pqn.section(PQNConfig).minibatch_steps(pqn) == 4


# ------------------------------------------------------------------ algorithm sections
def test_section_fields_by_dotted_key_and_nested_yaml(tmp_path):
    config = load_config(None, ["ppo.clip_eps=0.1", "async.max_staleness=3"])
    assert config.section(PPOConfig).clip_eps == pytest.approx(0.1) and config.async_.max_staleness == 3
    assert (
        config.value("ppo.clip_eps") == config.section(PPOConfig).clip_eps
        and config.section(PPOConfig).ent_coef == 0.01
    )  # the rest: defaults
    path = tmp_path / "run.yaml"
    path.write_text(
        "algo: qmix\nq:\n  td_lambda: 0.5\nreplay:\n  buffer_size: 64\n  gradient_steps: 2\n  bootstrap_time_limit: false\n"
    )
    config = load_config(path, ["replay.batch_size=8"])
    assert (
        config.section(QConfig).td_lambda,
        config.section(ReplayConfig).buffer_size,
        config.section(ReplayConfig).gradient_steps,
        config.section(ReplayConfig).batch_size,
    ) == (
        0.5,
        64,
        2,
        8,
    )
    assert set(config.sections) == {"q", "replay", "mixer"}  # qmix: its mixer section too
    with pytest.raises(AttributeError, match=r"algo=qmix has no PPOConfig section \(its sections: q, replay, mixer\)"):
        config.section(PPOConfig)
    with pytest.raises(AttributeError):  # the sections are read by class: no attribute stands for one
        config.ppo  # type: ignore[attr-defined]  # noqa: B018
    assert from_dict(config.to_dict()) == config


def test_a_flat_key_of_a_section_names_its_section():
    err = _error(["update_epochs=2"])
    assert err.field == "update_epochs" and "is a key of a section now: write ppo.update_epochs" in str(err)
    err = _error(["algo=qmix", "update_epochs=2"])  # a key of other algorithms' sections only
    assert "is ppo.update_epochs of algo=ippo, mappo, happo, sable; pqn.update_epochs of algo=pqn_vdn" in str(err)
    err = _error(["algo=pqn_vdn", "num_minibatches=2"])
    assert err.field == "num_minibatches" and "write pqn.num_minibatches" in str(err)
    err = _error(["algo=qmix", "clip_eps=0.1"])  # a key of another algorithm's section
    assert err.field == "clip_eps"
    assert (
        str(err)
        == "clip_eps: is ppo.clip_eps of algo=ippo, mappo, happo, sable; algo=qmix takes q.*, replay.*, mixer.*"
    )
    err = _error(["algo=qmix", "num_minibatches=1"])  # the replay algorithms have none
    assert "ppo.num_minibatches of algo=ippo, mappo, happo, sable" in str(
        err
    ) and "algo=qmix takes q.*, replay.*" in str(err)
    err = _error(["eps_start=0.5"])
    assert "q.eps_start of algo=pqn_vdn, iql, vdn, qmix, shaq, transf_qmix" in str(err)
    assert "algo=ippo takes ppo.*, async.*" in str(err)


def test_a_section_of_another_algorithm_is_refused():
    err = _error(["algo=qmix", "ppo.clip_eps=0.1"])
    assert err.field == "ppo" and "algo=qmix takes q.*, replay.*" in str(err)
    err = _error(["algo=pqn_vdn", "async.deterministic=true"])  # pqn_vdn has no mode=async
    assert err.field == "async" and "the section of algo=ippo, mappo" in str(err)
    err = _error(["ppo=3"])
    assert err.field == "ppo" and "is a section" in str(err)


def test_unknown_section_key_did_you_mean():
    err = _error(["ppo.clip_epss=0.1"])
    assert err.field == "ppo.clip_epss" and "did you mean 'ppo.clip_eps'" in str(err)
    err = _error(["async.actor_device=1"])
    assert err.field == "async.actor_device" and "did you mean 'async.actor_devices'" in str(err)


def test_replace_takes_nested_sections_and_a_new_algo_starts_from_its_defaults():
    config = load_config(None, ["ppo.clip_eps=0.1"])
    changed = replace(config, ppo={"num_minibatches": 2})
    assert changed.section(PPOConfig).num_minibatches == 2 and changed.section(PPOConfig).clip_eps == pytest.approx(
        0.1
    )  # the rest kept
    assert config.section(PPOConfig).num_minibatches == 4
    with pytest.raises(ConfigError) as info:
        replace(config, ppo={"num_minibatches": 3})
    assert info.value.field == "ppo.num_minibatches"
    with pytest.raises(ConfigError) as info:
        replace(config, clip_eps=0.1)
    assert info.value.field == "clip_eps" and "write ppo.clip_eps" in str(info.value)
    qmix = replace(config, algo="qmix")
    assert set(qmix.sections) == {"q", "replay", "mixer"} and qmix.section(ReplayConfig) == load_config(
        None, ["algo=qmix"]
    ).section(ReplayConfig)


def test_every_train_config_in_experiments_loads():
    """The run configs shipped in experiments/ (not the sweep files, which have `axes`) load and
    validate as they are: a renamed or removed field would otherwise break them unseen."""
    from pathlib import Path

    import yaml

    shipped = sorted((Path(__file__).resolve().parent.parent / "experiments").glob("*.yaml"))
    runs = [p for p in shipped if "axes" not in (yaml.safe_load(p.read_text()) or {})]
    assert {p.name for p in runs} >= {"ippo_spread_fast.yaml", "jaxmarl_ippo_ff_mpe.yaml", "smax_3m_rnn.yaml"}
    for path in runs:
        config = load_config(str(path), [])
        assert config.env and config.algo, path


def test_the_engine_names_no_field():
    """marljax/schema.py knows no setting: no string in it is a key of the core, of a layer's part
    or of an algorithm's section ("algo" aside: the algorithm registry's own selector, in its error
    message). Negative control: the same reader finds the keys in config.py, which declares them."""
    import ast
    from pathlib import Path

    from marljax.config import algorithm_schema, algorithms, core_keys
    from marljax.schema import fields

    keys = set(core_keys()) | {s for a in algorithms() for s in algorithm_schema(a).sections}
    keys |= {f for a in algorithms() for cls in algorithm_schema(a).sections.values() for f in fields(cls)}
    keys -= {"algo"}
    package = Path(__file__).resolve().parent.parent / "marljax"

    def named(path: Path) -> set[str]:
        strings = {n.value for n in ast.walk(parse_source(path.read_text())) if isinstance(n, ast.Constant)}
        return keys & {s for s in strings if isinstance(s, str)}

    assert named(package / "schema.py") == set()
    assert {"env_kwargs", "network", "total_timesteps", "recurrent"} <= named(package / "config.py")


def test_each_layer_declares_its_section_and_config_yaml_keeps_its_order():
    """The layers' parts sit where config.yaml always had them; a part whose key is taken is refused."""
    from marljax.parallel.settings import DistributedConfig
    from marljax.pipeline.settings import AsyncConfig
    from marljax.run_settings import CheckpointConfig, LogConfig
    from marljax.schema import Part, register_part

    config = load_config(None, ["mode=async"])
    keys = list(config.to_dict())
    assert keys[keys.index("param_sharing") :] == [
        "param_sharing", "seed", "num_seeds", "mesh", "distributed", "log", "reward_shaping", "out_dir",
        "overwrite", "num_chunks", "progress", "plot", "compile_cache", "checkpoint_every", "keep_checkpoints",
        "resume", "nan_guard", "eval_every", "eval_episodes", "eval_greedy", "mode", "ppo", "async",
    ]  # fmt: skip
    assert type(config.mesh) is MeshConfig and type(config.distributed) is DistributedConfig
    assert type(config.log) is LogConfig and type(config.async_) is AsyncConfig
    assert config.part("checkpoint") == CheckpointConfig() and config.checkpoint_every == 100
    with pytest.raises(ValueError, match=r"keys already registered by another part: \['num_envs'\]"):
        register_part(Part("clash", dataclasses.make_dataclass("Clash", [("num_envs", int, 1)]), order=99, flat=True))


def test_config_declares_every_registered_part():
    """`Config` is a static dataclass: its fields are the registered parts' (each flat part a base,
    each nested one a field of its class; `async`, an algorithm section, as the typed `async_`), so
    a part registered without being added there is caught here, not met as a missing attribute."""
    import marljax.config
    from marljax.schema import _PARTS, fields

    config_fields = {f.name: f for f in dataclasses.fields(marljax.config.Config)}
    flat = {p.cls for p in _PARTS.values() if p.flat}
    assert flat == set(marljax.config.Config.__bases__)
    nested = {p.key: p.cls for p in _PARTS.values() if not p.flat and p.when is None}
    own = {n: f.type for n, f in config_fields.items() if not any(n in fields(c) for c in flat)}
    assert own == {**{k: c.__name__ for k, c in nested.items()}, "sections": "Mapping[str, Any]"}
    assert all(p.key == "async" for p in _PARTS.values() if p.when is not None)
    assert marljax.config.Config.async_.fget.__annotations__["return"] == "AsyncConfig"
    assert len(flat) >= 5 and {"mesh", "distributed"} <= set(own)  # the control: the walk found the parts
