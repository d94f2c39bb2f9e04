"""Defaults per environment family: an algorithm declares them (`AlgorithmSchema.family_defaults`),
the config applies those of the env's family under every setting given explicitly, config.yaml
and the run's log say which applied, `--help` shows them for the chosen env, and
`family_defaults=none` gives the algorithm's own defaults back."""

from __future__ import annotations

import dataclasses

import pytest

from marljax.algos import registry
from marljax.algos.api import AlgorithmSpec
from marljax.cli import config_help
from marljax.config import (
    ConfigError,
    algorithm_schema,
    algorithms,
    family_defaults,
    from_dict,
    load_config,
    read_yaml_mapping,
    to_flat,
)
from marljax.envs.registry import registered_env_ids
from marljax.families import FAMILY_NAMES, OTHER, family_of
from marljax.train.records import config_yaml, family_note, read_record

IPPO_MPE = {"num_steps": 64, "lr": 4e-3}  # what ippo declares for the mpe family (marljax/algos/ippo.py)


def without_choice(config) -> dict:
    """config.to_dict() without the family_defaults key itself: every setting the run uses."""
    return {k: v for k, v in config.to_dict().items() if k != "family_defaults"}


@pytest.mark.parametrize(
    "env, family",
    [
        ("MPE_simple_spread_v3", "mpe"), ("MPE_simple_speaker_listener_v4", "mpe"), ("MPE_simple_facmac_3a_v1", "mpe"),
        ("SMAX", "smax"), ("HeuristicEnemySMAX", "smax"), ("LearnedPolicyEnemySMAX", "smax"),
        ("overcooked", "overcooked"), ("overcooked_v2", "overcooked"), ("hanabi", "hanabi"),
        ("storm", "storm"), ("storm_2p", "storm"), ("storm_np", "storm"), ("coin_game", "coin_game"),
        ("switch_riddle", "switch_riddle"), ("jaxnav", "jaxnav"), ("ant_4x2", "mabrax"),
        ("JaxRobotarium_navigation", "robotarium"), ("jumanji:Connector-v3", "jumanji"),
        ("pettingzoo:pkg.envs:parallel_env", "host"), ("my_pkg.envs:make", "custom"), ("NotAnEnv", OTHER),
    ],
)  # fmt: skip
def test_each_env_id_has_its_family(env, family):
    assert family_of(env) == family


def test_every_jaxmarl_id_belongs_to_a_family():
    """A JaxMARL id no family claims would never get its family's defaults."""
    unclaimed = [env for env in registered_env_ids() if family_of(env) == OTHER]
    assert unclaimed == []


def test_the_family_defaults_apply_on_its_envs_only():
    mpe = load_config(None, [])  # the default env: MPE simple_spread
    assert {key: mpe.value(key) for key in IPPO_MPE} == IPPO_MPE
    assert family_defaults(mpe) == ("mpe", IPPO_MPE)
    generic = load_config(None, ["family_defaults=none"])
    assert (generic.num_steps, generic.lr) == (128, 2e-3)  # ippo's own (the core's) defaults
    # everything else is the same run: only the declared keys differ
    differ = {k for k, v in to_flat(without_choice(mpe)).items() if to_flat(without_choice(generic))[k] != v}
    assert differ == set(IPPO_MPE)
    storm = load_config(None, ["env=storm_2p"])  # ippo declares the same two for STORM
    assert family_defaults(storm) == ("storm", IPPO_MPE) and (storm.num_steps, storm.lr) == (64, 4e-3)
    jumanji = load_config(None, ["env=jumanji:Connector-v3"])  # the learning rate alone there
    assert family_defaults(jumanji) == ("jumanji", {"lr": 3e-3}) and (jumanji.num_steps, jumanji.lr) == (128, 3e-3)
    smax = load_config(None, ["env=HeuristicEnemySMAX"])
    assert family_defaults(smax) == ("smax", {})
    assert without_choice(smax) == without_choice(load_config(None, ["env=HeuristicEnemySMAX", "family_defaults=none"]))
    # mappo declares the same for MPE, and its critic sees the time there (as happo's does)
    assert family_defaults(load_config(None, ["algo=mappo"])) == ("mpe", {**IPPO_MPE, "critic.time": True})
    assert family_defaults(load_config(None, ["algo=happo"])) == ("mpe", {"critic.time": True})
    # and for Hanabi, where it was searched for MAPPO; on STORM and Coin Game its own defaults won the search
    assert family_defaults(load_config(None, ["algo=mappo", "env=hanabi"])) == ("hanabi", IPPO_MPE)
    for env, family in (("storm_2p", "storm"), ("coin_game", "coin_game")):
        assert family_defaults(load_config(None, ["algo=mappo", f"env={env}"])) == (family, {})
    # the Q-learners' own defaults won their SMAX 3m searches (docs/performance.md section 3)
    for algo in ("pqn_vdn", "iql", "vdn", "qmix", "shaq"):
        assert family_defaults(load_config(None, [f"algo={algo}", "env=HeuristicEnemySMAX"])) == ("smax", {})
    # the replay learners declare one-step targets bootstrapping past the time limit for MPE, nothing else
    mpe_targets = {"q.td_lambda": 0.0, "replay.bootstrap_time_limit": True}
    for algo in ("iql", "vdn", "qmix", "shaq"):
        mpe, own = load_config(None, [f"algo={algo}"]), load_config(None, [f"algo={algo}", "family_defaults=none"])
        assert family_defaults(mpe) == ("mpe", mpe_targets)
        differ = {k for k, v in to_flat(without_choice(mpe)).items() if to_flat(without_choice(own))[k] != v}
        assert differ == set(mpe_targets) and (own.value("q.td_lambda"), own.value("replay.bootstrap_time_limit")) == (
            0.65,
            False,
        )
    assert family_defaults(load_config(None, ["algo=pqn_vdn"])) == ("mpe", {})  # pqn_vdn's lambda-return: its own
    # a family named explicitly applies on any env
    forced = load_config(None, ["env=coin_game", "family_defaults=mpe"])  # coin_game declares none for ippo
    assert (forced.num_steps, forced.lr) == (64, 4e-3)


def test_an_explicit_setting_wins_and_the_record_leaves_it_out():
    config = load_config(None, ["lr=2.5e-4"])
    assert (config.lr, config.num_steps) == (2.5e-4, 64)
    assert family_defaults(config) == ("mpe", {"num_steps": 64})
    assert "num_steps=64" in family_note(config) and "lr" not in family_note(config)
    both = load_config(None, ["lr=2.5e-4", "num_steps=128"])
    assert family_defaults(both) == ("mpe", {}) and family_note(both) is None


def test_a_jaxmarl_file_keeps_its_own_settings(tmp_path):
    path = tmp_path / "ippo_ff_mpe.yaml"
    path.write_text('"LR": 2.5e-4\n"NUM_ENVS": 16\n"NUM_STEPS": 128\n"ENV_NAME": "MPE_simple_spread_v3"\n')
    config = load_config(path)
    assert (config.lr, config.num_steps, config.num_envs) == (2.5e-4, 128, 16)


def test_config_yaml_records_the_family_and_reruns_as_the_same_run(tmp_path):
    config = load_config(None, [])
    path = tmp_path / "config.yaml"
    path.write_text(config_yaml(config))
    record = read_record(path)
    assert record["family"] == "mpe" and record["family_defaults"] == "num_steps=64, lr=0.004"
    assert from_dict(read_yaml_mapping(path, "config", "")) == config  # resume and rerun see the same config
    # negative control: a run that kept none says nothing of a family
    plain = load_config(None, ["family_defaults=none"])
    path.write_text(config_yaml(plain))
    assert "family" not in read_record(path)


def test_help_shows_the_chosen_envs_defaults():
    lines = {line.split()[0]: line.split()[1:3] for line in config_help("train", "", "", "ippo").splitlines()
             if line.startswith("  ")}  # fmt: skip
    assert lines["num_steps"] == ["64", "*"] and lines["lr"] == ["0.004", "*"]
    smax = {line.split()[0]: line.split()[1:3] for line in
            config_help("train", "", "", "ippo", "HeuristicEnemySMAX").splitlines() if line.startswith("  ")}  # fmt: skip
    assert smax["num_steps"][0] == "128" and smax["num_steps"][1] != "*"
    assert "mpe: num_steps=64, lr=0.004" in config_help("train", "", "", "ippo", "HeuristicEnemySMAX")


def test_a_bad_choice_is_one_line_before_anything_compiles():
    with pytest.raises(ConfigError, match=r"^family_defaults: got 'mpee'.*; allowed: auto, none, .*mpe"):
        load_config(None, ["family_defaults=mpee"])


@pytest.mark.parametrize("algo", algorithms())
def test_every_declared_family_default_is_a_valid_setting(algo):
    """Each algorithm's declared families are known ones, and their settings validate."""
    declared = algorithm_schema(algo).family_defaults
    assert set(declared) <= set(FAMILY_NAMES)
    for family, over in declared.items():
        config = load_config(None, [f"algo={algo}", f"family_defaults={family}"])
        assert {key: config.value(key) for key in to_flat(dict(over))} == to_flat(dict(over))


def test_a_typo_in_a_declared_family_is_refused_at_registration(monkeypatch):
    spec = registry.get("ippo")
    bad = dataclasses.replace(spec.schema, name="ippo_typo", family_defaults={"mpee": {"lr": 1e-3}})
    monkeypatch.setattr(registry, "_SPECS", dict(registry._SPECS))
    with pytest.raises(ValueError, match=r"unknown env families \['mpee'\]"):
        registry.register(AlgorithmSpec(bad, spec.build, spec.losses))


def test_the_configuration_page_lists_every_declared_family_default():
    """docs/guide/configuration.md's "Declared today" table: one row per (algo, family) declared, each naming every
    key it sets (a row for a default removed, or a key missing from a row, fails here)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "guide" / "configuration.md").read_text()
    rows = {}
    for line in text.split("| algo | family | defaults there (its own) |")[1].split("\n\n")[0].splitlines()[2:]:
        algo, family, cell = (c.strip() for c in line.strip("|").split("|", 2))
        rows[algo.strip("`"), family.strip("`")] = cell
    declared = {(a, f): over for a in algorithms() for f, over in algorithm_schema(a).family_defaults.items()}
    assert set(rows) == set(declared)
    for pair, over in declared.items():
        missing = [key for key in to_flat(dict(over)) if f"{key}=" not in rows[pair]]
        assert missing == [], (pair, missing)
