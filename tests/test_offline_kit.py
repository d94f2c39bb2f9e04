"""The offline kit and the GPU protocol (experiments/offline_kit.sh, gpu_protocol.sh,
protocol_summary.py, absent_extras.py): the parts that need no download here, in seconds; and
the whole rehearsal (a venv like the offline GPU node's, the kit installed with --no-index, the
protocol end to end on the CPU with --small), nightly."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = ROOT / "experiments"
sys.path.insert(0, str(EXPERIMENTS))

import absent_extras  # noqa: E402
import kit_manifest  # noqa: E402
import protocol_summary  # noqa: E402

STEPS = protocol_summary.STEPS


def _bash(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                          env={**os.environ, **(env or {})})  # fmt: skip


def _dry_run(*flags: str, extra: dict | None = None) -> dict[str, tuple[int, list[str]]]:
    """gpu_protocol.sh --dry-run: {step: (limit, commands)}, and 'total'."""
    # an empty TEST_WORKERS is the protocol's own default (`${TEST_WORKERS:-12}`), whatever this process has
    proc = _bash("experiments/gpu_protocol.sh", "/tmp/protocol-out", "--dry-run", "--kit", "/kit", *flags,
                 env={"TEST_WORKERS": "", **(extra or {})})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    steps: dict[str, tuple[int, list[str]]] = {}
    step = None  # the step the command lines that follow belong to
    for line in proc.stdout.splitlines():
        if line.startswith("\t$ "):
            assert step is not None, f"a command before any step: {line!r}"
            steps[step][1].append(line[3:])
        else:
            step, limit = line.split("\t")
            steps[step] = (int(limit), [])
    return steps


def test_every_step_ends_inside_10_minutes_and_all_inside_about_30():
    steps = _dry_run()
    assert [s for s in steps if s != "total"] == list(STEPS)
    assert all(limit <= 600 for limit, _ in steps.values() if limit != steps["total"][0])
    assert steps["total"][0] == sum(limit for name, (limit, _) in steps.items() if name != "total") <= 31 * 60
    commands = [c for _, cs in steps.values() for c in cs]
    assert not [c for c in commands if "git clone" in c or "pip install" in c]  # nothing from the network
    assert any("bench scale" in c for c in steps["bench_scale"][1])
    assert [c.split()[-1] for c in steps["dtype"][1]] == ["dtype=float32", "dtype=bfloat16"]
    assert "mode=async" in steps["async"][1][0] and "-n 12 " in steps["tests"][1][0]
    assert "MARLJAX_FAILURES_LOG=/tmp/protocol-out/tests_failures.log " in steps["tests"][1][0]
    assert "-n 3 " in _dry_run("--step", "tests", extra={"TEST_WORKERS": "3"})["tests"][1][0]
    assert all("--jaxmarl /kit/JaxMARL" in c for c in steps["jaxmarl_own_config"][1] + steps["jaxmarl_4096_envs"][1])
    assert "--num-envs 4096" in steps["jaxmarl_4096_envs"][1][0]


def test_small_and_one_step():
    small = _dry_run("--small")
    assert "total_timesteps=16384" in small["train"][1][0] and "-n 1" in small["tests"][1][0]
    one = _dry_run("--step", "train")
    assert list(one) == ["train", "total"]
    proc = _bash("experiments/gpu_protocol.sh", "/tmp/x", "--dry-run", "--step", "nope")
    assert proc.returncode == 2 and "the steps are doctor tests" in proc.stderr


def _write_fixture(out: Path, rcs: dict[str, int]) -> None:
    """A protocol's OUT as gpu_protocol.sh leaves it: steps.tsv and one log per step."""
    doctor = {"versions": {"jax": "0.11.2"}, "python": "3.12.3", "backend": "gpu", "device_count": 1, "builds": ["cuda13"],
              "devices": [{"platform": "gpu", "kind": "NVIDIA H100 80GB HBM3"}]}  # fmt: skip
    row = {
        "num_envs_per_device": 64,
        "train_env_steps_per_s": 1.5e6,
        "mfu": 0.012,
        "peak_device_mb": 900.0,
        "compile_s": 9.5,
    }
    side = {"bench": "jaxmarl_side_by_side", "platform": "gpu", "device_kind": "H100", "num_envs": 16, "seeds": 10,
            "timesteps": 2e6, "speedup": 1.8, "env_alone_over_jaxmarl": 9.0,
            **{w: {"env_steps_per_s": 1e6, "compile_s": 4.0, "final_return": -22.0} for w in ("jaxmarl", "marljax")}}  # fmt: skip
    bench = {"num_envs": 4096, "train_env_steps_per_s": 2e7, "mfu": 0.05, "peak_matmul_gflops": 5e5, "compile_s": 8.0}
    asynch = {"generation_samples_per_s": 4e6, "learning_samples_per_s": 3e6, "sync_samples_per_s": 1.6e6,
              "async_samples_per_s": 2.7e6, "overlap_efficiency": 0.9}  # fmt: skip
    logs = {
        "doctor": [("python3 -m marljax.cli doctor --expect gpu", ["jax 0.11.2", json.dumps(doctor)])],
        "tests": [
            (
                "python3 -m pytest -q -n 4",
                [
                    "..s..",
                    "SKIPPED [1] tests/x.py:3: needs wandb, not installed here",
                    "412 passed, 9 skipped in 301.2s",
                ],
            )
        ],
        "bench_scale": [("python3 -m marljax.cli bench scale", [json.dumps({"stopped": "max-envs", "rows": [row]})])],
        "train": [("python3 -m marljax.cli train", ["return per agent -27.20 -> -22.03 (+5.17); 3.1M env-steps/s"])],
        "jaxmarl_own_config": [("python3 side.py --timesteps 2e6", [json.dumps(side)])],
        "jaxmarl_4096_envs": [("python3 side.py --num-envs 4096", [json.dumps(side | {"num_envs": 4096})])],
        "dtype": [
            (f"python3 -m marljax.cli bench num_envs=4096 dtype={d}", [json.dumps(bench | {"peak_matmul_dtype": d})])
            for d in ("float32", "bfloat16")
        ],
        "async": [("python3 -m marljax.cli bench mode=async", [json.dumps(asynch)])],
    }
    for name, blocks in logs.items():
        text = [part for command, lines in blocks for part in (f"$ {command}", *lines, "whole process: 12.5 s")]
        (out / f"{name}.log").write_text("\n".join(text) + "\n")
    (out / "steps.tsv").write_text("".join(f"{name}\t{rc}\t30\t60\n" for name, rc in rcs.items()))


def test_the_summary_shows_every_figure_with_its_command_and_every_exit_code(tmp_path):
    _write_fixture(tmp_path, {name: 0 for name in STEPS})
    lines, figures = protocol_summary.summary(tmp_path)
    text = "\n".join(lines)
    assert "1 x gpu NVIDIA H100 80GB HBM3; accelerator build cuda13" in text
    assert "412 passed, 9 skipped in 301.2s" in text and "skipped for want of: wandb" in text
    assert (
        "1,500,000" in text
        and "return per agent -27.20 -> -22.03 (+5.17); 3.1M env-steps/s; whole process 12.5 s" in text
    )
    assert "marljax / jaxmarl: 1.80x" in text and "overlap efficiency 0.90" in text
    assert "float32: 20,000,000 env-steps/s" in text and "bfloat16: 20,000,000 env-steps/s" in text
    assert "  from: python3 -m marljax.cli bench num_envs=4096 dtype=bfloat16" in text
    assert text.count("  from: ") == 9  # one per command: every figure says which command printed it
    table = lines[lines.index(next(l for l in lines if l.startswith("step "))) + 1 :]  # noqa: E741
    assert [row.split()[:2] for row in table[: len(STEPS)]] == [[name, "0"] for name in STEPS]
    assert figures["steps"] == {name: 0 for name in STEPS} and figures["dtype_1"]["peak_matmul_dtype"] == "bfloat16"
    assert protocol_summary.main([str(tmp_path), "--check"]) == 0


def test_check_fails_on_a_failed_timed_out_or_missing_step(tmp_path, capsys):
    rcs = {name: 0 for name in STEPS} | {"dtype": 124}
    del rcs["async"]
    _write_fixture(tmp_path, rcs)
    assert protocol_summary.main([str(tmp_path), "--check"]) == 1
    out = capsys.readouterr().out
    assert "dtype: TIMED OUT (exit 124)" in out and "async: not run" in out


def _fake_wheel(folder: Path, name: str, version: str) -> Path:
    """A wheel of nothing but its metadata, named like the real one."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


def _install(kit: Path, *flags: str) -> subprocess.CompletedProcess:
    command = ("experiments/offline_kit.sh", "install", str(kit), "--expect", "cpu", *flags)
    return _bash(*command, env={"PYTHON": sys.executable})


def test_install_refuses_to_replace_an_installed_jax(tmp_path):
    _fake_wheel(tmp_path, "jax", "0.0.1")
    kit_manifest.write(tmp_path, "abc", "none", "offline_node.txt")
    proc = _install(tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "refused: jax" in proc.stderr and "the kit has 0.0.1" in proc.stderr and "--keep-installed" in proc.stderr
    assert "pip install" not in proc.stdout  # refused before pip ran


def _kit(folder: Path) -> Path:
    """A kit as build leaves it, small: a wheel (of a jax that install_plan refuses, so that nothing
    is ever installed here), protocol files and a JaxMARL file, and its MANIFEST.txt."""
    folder.mkdir()
    _fake_wheel(folder, "jax", "0.0.1")
    (folder / "protocol").mkdir()
    (folder / "protocol" / "gpu_protocol.sh").write_text("echo protocol\n")
    (folder / "JaxMARL" / "baselines").mkdir(parents=True)
    (folder / "JaxMARL" / "baselines" / "ippo.py").write_text("print('ippo')\n")
    kit_manifest.write(folder, "abc", "def", "offline_node.txt")
    return folder


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rewrite_manifest(kit: Path, edit) -> None:
    """MANIFEST.txt with edit applied to its lines and its own digest recomputed, as a tamperer would."""
    body = "".join(edit((kit / "MANIFEST.txt").read_text().splitlines(keepends=True)[:-1]))
    own = hashlib.sha256(body.encode()).hexdigest()
    (kit / "MANIFEST.txt").write_text(body + f"manifest sha256:{own} of the lines above\n")


def _altered(kit: Path) -> str:
    with open(kit / "jax-0.0.1-py3-none-any.whl", "ab") as f:
        f.write(b"\0")
    return "jax-0.0.1-py3-none-any.whl differs from the file the kit was built with"


def _extra(kit: Path) -> str:
    _fake_wheel(kit, "evil", "1.0")
    return "evil-1.0-py3-none-any.whl is not in MANIFEST.txt"


def _missing(kit: Path) -> str:
    (kit / "protocol" / "gpu_protocol.sh").unlink()
    return "protocol/gpu_protocol.sh is in MANIFEST.txt and missing from the kit"


def _symlink(kit: Path) -> str:
    target = kit / "protocol" / "gpu_protocol.sh"
    (kit.parent / "elsewhere.sh").write_bytes(target.read_bytes())
    target.unlink()
    target.symlink_to(kit.parent / "elsewhere.sh")
    return "protocol/gpu_protocol.sh is a symlink; the build wrote a file"


def _listed_too(kit: Path) -> str:
    """An extra wheel added to the list and the list's own digest recomputed: pinned digest refuses it."""
    _fake_wheel(kit, "evil", "1.0")
    digest = _sha256(kit / "evil-1.0-py3-none-any.whl")
    row = f"{1:>10,}  wheel  evil-1.0-py3-none-any.whl evil 1.0 sha256:{digest}\n"
    _rewrite_manifest(kit, lambda lines: [*lines[:3], row, *lines[3:]])
    return "given with --manifest-sha256"


def _manifest_edited(kit: Path) -> str:
    _altered(kit)  # the wheel changed and its row changed to match, but not the list's own digest
    digest = _sha256(kit / "jax-0.0.1-py3-none-any.whl")
    lines = (kit / "MANIFEST.txt").read_text().splitlines(keepends=True)
    lines = [line[: line.rindex("sha256:")] + f"sha256:{digest}\n" if "jax-0.0.1" in line else line for line in lines]
    (kit / "MANIFEST.txt").write_text("".join(lines))
    return "MANIFEST.txt was changed after the build: its lines do not match the digest on its last line"


def _manifest_truncated(kit: Path) -> str:
    lines = (kit / "MANIFEST.txt").read_text().splitlines(keepends=True)
    (kit / "MANIFEST.txt").write_text("".join(lines[:-1]))
    return "MANIFEST.txt's last line is not the digest of its lines"


def _no_manifest(kit: Path) -> str:
    (kit / "MANIFEST.txt").unlink()
    return "holds no MANIFEST.txt"


@pytest.mark.parametrize(
    "tamper",
    [_altered, _extra, _missing, _symlink, _listed_too, _manifest_edited, _manifest_truncated, _no_manifest],
    ids=lambda f: f.__name__.strip("_"),
)
def test_install_refuses_a_kit_that_differs_from_its_manifest_before_pip_sees_it(tmp_path, tamper):
    """Issue 66: a wheel whose bytes no longer matched its digest, and one the list lacks, were
    installed. Each tampering is refused in one line (exit 4) before the install plan runs; the
    untouched kit (the control) passes the check and reaches the plan, which refuses its fake jax
    (exit 3), so that nothing is installed here either way."""
    kit = _kit(tmp_path / "kit")
    pinned = kit_manifest.OWN_DIGEST.search((kit / "MANIFEST.txt").read_text())[1]
    control = _install(kit, "--manifest-sha256", pinned)
    assert control.returncode == 3 and "refused: jax" in control.stderr, control.stdout + control.stderr
    assert "== verified 3 files against" in control.stdout and pinned in control.stdout

    why = tamper(kit)
    proc = _install(kit, "--manifest-sha256", pinned)
    assert proc.returncode == kit_manifest.REFUSED, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and why in proc.stderr and "nothing was installed" in proc.stderr, proc.stderr
    assert "installing into" not in proc.stdout  # refused before the plan and pip


def test_an_unreadable_file_is_refused_naming_it(tmp_path, monkeypatch):
    """Root reads a file of mode 000, so the read fails here by a patched read_bytes."""
    kit = _kit(tmp_path / "kit")
    real = Path.read_bytes

    def read_bytes(path: Path) -> bytes:
        if path.name == "ippo.py":
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    with pytest.raises(kit_manifest.Refused) as refused:
        kit_manifest.verify(kit, tmp_path)
    assert refused.value.args == (f"{kit}/JaxMARL/baselines/ippo.py cannot be read (Permission denied)",)
    assert not list(tmp_path.glob("*.whl"))  # nothing staged when a file is refused
    monkeypatch.setattr(Path, "read_bytes", real)
    assert kit_manifest.verify(kit, tmp_path)[1] == 3 and [p.name for p in tmp_path.glob("*.whl")] == [
        "jax-0.0.1-py3-none-any.whl"
    ]


def test_install_plan_skips_the_same_version_and_keeps_the_installed_one_on_request(tmp_path):
    from importlib.metadata import version

    same, other = _fake_wheel(tmp_path, "numpy", version("numpy")), _fake_wheel(tmp_path, "jax", "0.0.1")
    script = f'source <(sed "/^case \\"\\${{1/,\\$d" experiments/offline_kit.sh); install_plan 1 {same} {other}'
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env={**os.environ, "PYTHON": sys.executable})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"skip {same} numpy {version('numpy')} is installed already",
                                        f"skip {other} kept the installed jax {version('jax')} (the kit has 0.0.1)"]  # fmt: skip


def test_the_kit_carries_nothing_the_node_holds_and_pins_everything():
    def names(path: Path) -> dict[str, str]:
        lines = [l.strip() for l in path.read_text().splitlines() if l.strip() and not l.startswith("#")]  # noqa: E741
        return {l.split("==")[0].lower().replace("_", "-"): l for l in lines}  # noqa: E741

    kit, node = names(EXPERIMENTS / "offline_kit.txt"), names(EXPERIMENTS / "offline_node.txt")
    assert not set(kit) & set(node)
    assert all("==" in req for req in kit.values())
    assert {"jaxmarl", "gymnax", "hydra-core", "omegaconf", "distrax", "pettingzoo", "tensorboardx"} <= set(kit)
    assert {"jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy"} <= set(node)


def test_a_missing_optional_package_is_a_skip_and_anything_else_a_failure(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in ("wandb", "jaxmarl") else real(name, *a)
    )
    assert absent_extras.missing_package(ModuleNotFoundError("No module named 'wandb'", name="wandb.proto")) == "wandb"
    assert (
        absent_extras.missing_package(ValueError('log.backends: wandb is not installed: pip install "marljax[wandb]"'))
        == "wandb"
    )
    assert absent_extras.missing_package(ModuleNotFoundError("No module named 'jaxmarl'", name="jaxmarl")) is None
    assert absent_extras.missing_package(ModuleNotFoundError("No module named 'mlflow'", name="mlflow")) in (
        None,
        "mlflow",
    )
    assert absent_extras.missing_package(AssertionError("wrong")) is None


def _jaxmarl_source() -> str | None:
    """A JaxMARL checkout or bare repository for the rehearsal: $JAXMARL_DIR, else none."""
    path = os.environ.get("JAXMARL_DIR")
    return path if path and Path(path).exists() else None


@pytest.mark.nightly
def test_the_offline_rehearsal_runs_every_step_with_exit_code_0(tmp_path):
    """Needs PyPI (the first run builds a cached venv like the node's, and every run downloads the
    kit's wheels), Python 3.12 or 3.13, and JAXMARL_DIR (a JaxMARL checkout); about 7 minutes on 2 cores."""
    jaxmarl = _jaxmarl_source()
    if jaxmarl is None:
        pytest.skip("set JAXMARL_DIR to a JaxMARL checkout (or bare git repository)")
    proc = _bash("experiments/offline_kit.sh", "rehearse", str(tmp_path / "kit"), "--jaxmarl", jaxmarl,
                 "--out", str(tmp_path / "out"), timeout=1800)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "pip check: the kit's packages have every dependency they declare" in proc.stdout
    for name in STEPS:
        assert f"\n{name}: ok" in proc.stdout, name
    kit_mib = sum(p.stat().st_size for p in (tmp_path / "kit").rglob("*") if p.is_file()) / 2**20
    assert kit_mib <= 64


def test_each_failure_is_written_as_its_test_ends(tmp_path):
    """The tests step's plugin (experiments/failures_as_they_end.py), under xdist as the step runs
    it: the failing test's traceback is in the file, once; the passing test (negative control) is not."""
    (tmp_path / "test_two.py").write_text(
        "def test_fine():\n    assert 1\n\n\ndef test_broken():\n    assert 2 + 2 == 5\n"
    )
    log = tmp_path / "failures.log"
    env = {**os.environ, "MARLJAX_FAILURES_LOG": str(log), "PYTHONPATH": str(ROOT / "experiments")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "failures_as_they_end", "-p", "no:cacheprovider",
                           str(tmp_path / "test_two.py")], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)  # fmt: skip
    assert proc.returncode == 1 and "1 failed, 1 passed" in proc.stdout, proc.stdout + proc.stderr
    text = log.read_text()
    assert text.count("==== ") == 1 and "test_two.py::test_broken (call)" in text and "assert (2 + 2) == 5" in text
    assert "test_fine" not in text
