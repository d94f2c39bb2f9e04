"""tpu/*.sh: with --dry-run each prints the gcloud commands it would run (parsed back here);
missing or malformed settings stop it with a message naming the flag."""

from __future__ import annotations

import glob
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

TPU = Path(__file__).resolve().parent.parent / "tpu"
FLAGS = ["--project", "my-proj", "--zone", "us-central2-b", "--bucket", "gs://my-bucket", "--dry-run"]


def _dry(script: str, *args: str, env: dict | None = None) -> list[list[str]]:
    proc = subprocess.run(["bash", str(TPU / script), *args], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [shlex.split(line) for line in proc.stdout.strip().splitlines()]


def _flags(argv: list[str]) -> dict:
    return dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)


def test_create_prints_a_tpu_vm_create_command():
    (argv,) = _dry("create.sh", *FLAGS, "--accelerator", "v5litepod-16", "--version", "v2-alpha-tpuv5-lite", "--spot")
    assert argv[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "create", "marljax"]
    assert _flags(argv) == {"zone": "us-central2-b", "project": "my-proj", "accelerator-type": "v5litepod-16",
                            "version": "v2-alpha-tpuv5-lite"}  # fmt: skip
    assert "--spot" in argv


def test_setup_ships_this_checkout_to_every_worker_and_installs_it():
    archive, scp, ssh = _dry("setup.sh", *FLAGS)
    assert archive[:2] == ["git", "-C"] and "archive" in archive
    assert scp[:5] == ["gcloud", "compute", "tpus", "tpu-vm", "scp"] and "--worker=all" in scp
    assert ssh[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "marljax"] and "--worker=all" in ssh
    remote = [step.strip() for step in _flags(ssh)["command"].split("&&")]
    assert remote[1:] == ["tar xzf marljax-src.tar.gz", "bash marljax/tpu/install.sh $HOME/marljax $HOME/venv tpu",
                          "bash marljax/tpu/mount.sh my-bucket $HOME/marljax-runs"]  # fmt: skip


@pytest.mark.parametrize(
    "build, spec, expect", [("tpu", "/src[tpu]", "tpu"), ("cuda12", "/src[cuda12]", "gpu"), ("cpu", "/src", "cpu")]
)
def test_install_builds_a_python_313_venv_with_uv_and_checks_the_device(build, spec, expect, tmp_path):
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }  # uv not bootstrapped yet
    *bootstrap, venv, pip, doctor = _dry("install.sh", "--dry-run", "/src", "/w/venv", build, env=env)
    uv = venv[0]
    assert uv == "uv" or uv.endswith("/marljax-uv/bin/uv")
    assert bootstrap == (
        [] if uv == "uv" else [["python3", "-m", "pip", "install", "--quiet", "--target", uv[: -len("/bin/uv")], "uv"]]
    )
    assert venv == [uv, "venv", "--clear", "--python", "3.13", "/w/venv"]
    assert pip == [uv, "pip", "install", "--python", "/w/venv/bin/python", spec]
    assert doctor == ["/w/venv/bin/marljax", "doctor", "--expect", expect]


def test_mount_installs_gcsfuse_from_googles_apt_repository(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no gcsfuse on this PATH
    *apt, mkdir, mount = _dry("mount.sh", "--dry-run", "gs://my-bucket", "/m", env=env)
    assert "https://packages.cloud.google.com/apt/doc/apt-key.gpg" in apt[0][2]
    assert "https://packages.cloud.google.com/apt gcsfuse-" in apt[1][2] and "sources.list.d/gcsfuse.list" in apt[1][2]
    assert apt[2:] == [["sudo", "apt-get", "-q", "update"], ["sudo", "apt-get", "-q", "install", "-y", "gcsfuse"]]
    assert mkdir == ["mkdir", "-p", "/m"] and mount == ["gcsfuse", "--implicit-dirs", "my-bucket", "/m"]


def _local_python(minor: str) -> str | None:
    """A Python `minor` installed on this machine (on PATH or pyenv's), or None: uv would fetch
    one from the network, which CI's machine does not reach."""
    pyenv = os.path.expanduser(os.environ.get("PYENV_ROOT", "~/.pyenv"))
    for candidate in [
        shutil.which(f"python{minor}"),
        *sorted(glob.glob(f"{pyenv}/versions/{minor}*/bin/python{minor}")),
    ]:
        if candidate and subprocess.run([candidate, "-c", "pass"], capture_output=True).returncode == 0:
            return candidate
    return None


@pytest.mark.slow
def test_setup_local_installs_this_checkout_for_real_and_prints_the_doctor_report(tmp_path):
    """The install lines of setup.sh run here, into a fresh directory, with jax's CPU build: a
    broken pip or uv line fails CI instead of a TPU worker."""
    from marljax.doctor import TESTED_JAX

    python = _local_python("3.13")
    if python is None:
        pytest.skip("no Python 3.13 on this machine, and uv's fetch of one needs a network")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "XLA_FLAGS")}
    env["MARLJAX_PYTHON"] = python
    proc = subprocess.run(["bash", str(TPU / "setup.sh"), "--local", str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["ok"] and report["expect"] == "cpu" and report["backend"] == "cpu" and report["builds"] == []
    assert ".".join(report["versions"]["jax"].split(".")[:2]) in TESTED_JAX and report["python"].startswith("3.13.")
    marljax = tmp_path / "venv" / "bin" / "marljax"
    assert marljax.is_file()
    version = subprocess.run([str(marljax), "--version"], capture_output=True, text=True, env=env, timeout=120)
    assert version.returncode == 0 and version.stdout.startswith("marljax 0.1.0")


@pytest.mark.parametrize("what", ["train", "sweep"])
def test_launch_runs_marljax_on_all_workers_with_distributed_auto(what):
    extra = ["experiments/sharing_ablation.yaml"] if what == "sweep" else []
    (argv,) = _dry(
        "launch.sh", *FLAGS, what, "run-1", *extra, "num_envs=1024", env={"PATH": "/usr/bin:/bin", "TPU_NAME": "pod-a"}
    )
    assert argv[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "pod-a"] and "--worker=all" in argv
    remote = shlex.split(_flags(argv)["command"])
    cli = remote[remote.index("nohup") + 1 :]
    assert cli[0].endswith("/venv/bin/marljax") and cli[1] == what
    assert "distributed=auto" in cli and "num_envs=1024" in cli and "out_dir=$HOME/marljax-runs/run-1" in cli
    assert (what == "train") == ("resume=true" in cli)
    assert cli[2:3] == extra[:1] or what == "train"


def test_logs_fetch_and_delete():
    (logs,) = _dry("logs.sh", *FLAGS)
    assert "--worker=0" in logs and "tail" in _flags(logs)["command"]
    mkdir, copy = _dry("fetch.sh", *FLAGS, "run-1")
    assert copy == ["gcloud", "storage", "cp", "--recursive", "gs://my-bucket/run-1", "runs/"]
    (delete,) = _dry("delete.sh", *FLAGS)
    assert delete[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "delete", "marljax"] and "--quiet" in delete


@pytest.mark.parametrize(
    "script, args, words",
    [
        ("create.sh", ["--zone", "z", "--dry-run"], "PROJECT is not set: pass --project"),
        ("launch.sh", ["--project", "p", "--zone", "z", "--dry-run", "train", "r"], "BUCKET is not set"),
        (
            "launch.sh",
            ["--project", "p", "--zone", "z", "--bucket", "my-bucket", "--dry-run", "train", "r"],
            "must start with gs://",
        ),
        ("launch.sh", [*FLAGS, "evaluate", "r"], "must be train or sweep"),
        ("launch.sh", [*FLAGS, "sweep", "r"], "needs a sweep file"),
        ("create.sh", [*FLAGS, "--name", "Bad_Name"], "TPU_NAME must be lower-case"),
    ],
)
def test_bad_settings_are_refused(script, args, words):
    proc = subprocess.run(
        ["bash", str(TPU / script), *args], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}
    )
    assert proc.returncode == 2 and words in proc.stderr and proc.stdout == ""
