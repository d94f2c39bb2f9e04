"""The one argument parser (marljax/arguments.py): what it sorts where, what it refuses and how the
usage line it makes reads."""

from __future__ import annotations

import pytest

from marljax.arguments import KEY_VALUES, Arguments, Option, UsageError, choice, number_list, positive, typed
from marljax.schema import ConfigError

EXAMPLE = Arguments(
    ("RUN_DIR",),
    config=True,
    options=(
        Option("--agents", "4,16", number_list(int, 1)),
        Option("--allow-mixed"),
        Option("seed_index", "N", typed("int"), 0),
    ),
    overrides=KEY_VALUES,
)


def test_each_argument_goes_where_its_kind_says(tmp_path):
    args = EXAMPLE.parse(["a.yaml", "lr=3e-4", "--agents", "4,8", "runs/x", "seed_index=2", "--allow-mixed"])
    assert args.config == "a.yaml" and args.positional == ["runs/x"] and args.overrides == ["lr=3e-4"]
    assert args.options == {"agents": (4, 8), "allow_mixed": True, "seed_index": 2}
    assert args.args == ("a.yaml", "lr=3e-4", "--agents", "4,8", "runs/x", "seed_index=2", "--allow-mixed")
    defaults = EXAMPLE.parse(["runs/x", "--agents=16"])  # --flag=value too; the others keep their defaults
    assert defaults.config is None and defaults.options == {"agents": (16,), "allow_mixed": False, "seed_index": 0}
    # a key=value whose value ends in .yaml is a setting, not the config file (unless it is a file)
    assert EXAMPLE.parse(["out_dir=x.yaml", "r"]).config is None
    (tmp_path / "b=c.yaml").write_text("{}\n")
    assert EXAMPLE.parse([str(tmp_path / "b=c.yaml"), "r"]).config == str(tmp_path / "b=c.yaml")


def test_the_usage_line_is_made_from_the_declaration():
    assert EXAMPLE.usage() == "RUN_DIR [CONFIG.yaml] [--agents 4,16] [--allow-mixed] [seed_index=N] [key=value ...]"
    assert Arguments(more="RUN").usage() == "RUN ..."
    assert Arguments().usage() == ""
    # an option its command's --help alone describes: parsed, left out of the usage line
    quiet = Arguments(options=(Option("seed", "N", typed("int"), 0, shown=False),))
    assert quiet.usage() == "" and quiet.parse(["seed=3"]).options == {"seed": 3}


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "missing RUN_DIR"),
        (["r", "s"], "unexpected argument 's'"),
        (["r", "b.yaml"], "unexpected argument 'b.yaml' (a CONFIG.yaml comes first)"),
        (["r", "--agent", "4"], "unknown option --agent; did you mean --agents?"),
        (["r", "--agents"], "--agents takes a value"),
        (["r", "--agents", "--allow-mixed"], "--agents takes a value"),
        (["r", "--allow-mixed=yes"], "--allow-mixed takes no value, got --allow-mixed=yes"),
        (["r", "--agents", "4,x"], "--agents: expected comma-separated whole numbers >= 1, got '4,x'"),
    ],
)
def test_a_wrong_shape_is_one_line_naming_the_argument(args, message):
    with pytest.raises(UsageError) as info:
        EXAMPLE.parse(args)
    assert str(info.value) == message
    assert EXAMPLE.refusal("marljax x", info.value) == f"{message} (usage: marljax x {EXAMPLE.usage()})"


def test_a_key_option_outside_the_settings_is_named_and_its_bad_value_is_a_config_error():
    export = Arguments(("A", "B"), options=(Option("seed_index", "N", typed("int"), 0),))
    with pytest.raises(UsageError, match="^unknown option seed_idx; did you mean seed_index[?]$"):
        export.parse(["a", "b", "seed_idx=1"])
    compare = Arguments(more="RUN")  # no key options: a = in a path is a path's
    assert compare.parse(["sweep:lr=0.1", "runs/a"]).positional == ["sweep:lr=0.1", "runs/a"]
    with pytest.raises(ConfigError, match="^seed_index: expected an integer, got 'x'$"):
        export.parse(["a", "b", "seed_index=x"])
    with pytest.raises(UsageError, match="^takes no options, got --x$"):
        compare.parse(["--x"])


@pytest.mark.parametrize(
    "convert, text, message",
    [
        (positive(int), "0", "n: expected a positive whole number, got '0'"),
        (positive(float), "nan", "n: expected a positive number, got 'nan'"),
        (number_list(float, 0), "0,-1", "n: expected comma-separated numbers >= 0, got '0,-1'"),
        (choice("cpu", "gpu"), "tpu", "n: expected one of cpu, gpu, got 'tpu'"),
        (typed("bool"), "maybe", "n: expected true or false, got 'maybe'"),
    ],
)
def test_converters_name_the_option_and_what_is_allowed(convert, text, message):
    with pytest.raises(ConfigError) as info:
        convert("n", text)
    assert str(info.value) == message
