"""``airflow-elastic cluster up|status|logs|requests|down`` from the shell, with kubectl as the client."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from tests.support.cluster_cli import cli

DAGS = Path(__file__).resolve().parents[2] / "dags"


def test_cluster_lifecycle_from_the_shell(tmp_path: Path):
    state = tmp_path / "cluster"
    started = cli("up", "--detach", state_dir=state)
    try:
        assert started.returncode == 0, started.stderr
        # The hint names an explicit connection; nothing else points Airflow at this cluster.
        hint = next(line for line in started.stdout.splitlines() if "AIRFLOW_CONN_LOCAL_CLUSTER" in line)
        conn = json.loads(hint.split("=", 1)[1].strip("'"))
        assert conn["conn_type"] == "kubernetes" and conn["extra"]["kube_config_path"] == str(state / "kubeconfig")
        assert "AIRFLOW_VAR_" not in started.stdout  # no image mapped, no scripts folder to name

        again = cli("up", "--detach", state_dir=state)
        assert again.returncode == 0 and "already running" in again.stdout

        kubeconfig = str(state / "kubeconfig")
        subprocess.run(
            [
                "kubectl",
                "--kubeconfig",
                kubeconfig,
                "run",
                "hello",
                "--image=python:3.11-slim",
                "--restart=Never",
                "--command",
                "--",
                "python",
                "-c",
                "print('hello from a local pod')",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            phase = subprocess.run(
                ["kubectl", "--kubeconfig", kubeconfig, "get", "pod", "hello", "-o", "jsonpath={.status.phase}"],
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout
            if phase == "Succeeded":
                break
            time.sleep(0.2)
        assert phase == "Succeeded"

        status = cli("status", state_dir=state)
        assert status.returncode == 0 and "nodes: 4" in status.stdout and "Succeeded 1" in status.stdout
        assert cli("logs", "hello", state_dir=state).stdout == "hello from a local pod\n"
        counted = cli("requests", state_dir=state).stdout
        assert any(line.split()[1:3] == ["create", "pods"] and "kubectl" in line for line in counted.splitlines())
    finally:
        stopped = cli("down", state_dir=state)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    gone = cli("status", state_dir=state)
    assert gone.returncode == 1 and "no local cluster is running" in gone.stderr
    # The state survives: a new `up` resumes the same objects.
    assert cli("up", "--detach", state_dir=state).returncode == 0
    try:
        pods = subprocess.run(
            ["kubectl", "--kubeconfig", str(state / "kubeconfig"), "get", "pods", "-o", "name"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert pods.stdout.split() == ["pod/hello"]
    finally:
        cli("down", state_dir=state)


def test_up_with_an_image_map_runs_images_without_a_command(tmp_path: Path):
    """``--image-map`` takes the examples' map file and ``IMAGE=COMMAND`` pairs; relative paths become absolute."""
    state = tmp_path / "cluster"
    (tmp_path / "hello.py").write_text("import sys; print('hello from', sys.argv[1:])\n")
    bad = cli("up", "--image-map", "no-such-file", state_dir=state, cwd=tmp_path)
    assert bad.returncode == 1 and "not a file and not IMAGE=COMMAND" in bad.stderr
    started = cli(
        "up", "--detach", "--image-map", str(DAGS / "image-map.yaml"), "--image-map",
        "local/hello:1=python hello.py --from-map", state_dir=state, cwd=tmp_path,
    )  # fmt: skip
    try:
        assert started.returncode == 0, started.stderr
        assert f"image local/hello:1 runs: python {tmp_path / 'hello.py'} --from-map" in started.stdout
        # The nightly pipeline's scripts are the mapped digits trainer's: the Variable that says where is printed.
        assert f"export AIRFLOW_VAR_NIGHTLY_TRAINING_SCRIPTS={DAGS / 'scripts'}\n" in started.stdout
        image_map = json.loads((state / "config.json").read_text())["image_map"]
        assert image_map["ghcr.io/airflow-elastic/tiny-trainer:0.1.0"] == [
            "python",
            str(DAGS / "scripts/train_tiny.py"),
        ]
        kubeconfig = str(state / "kubeconfig")
        run = ["kubectl", "--kubeconfig", kubeconfig, "run", "hello", "--image=local/hello:1", "--restart=Never"]
        subprocess.run([*run, "--", "extra"], check=True, capture_output=True, timeout=60)
        deadline = time.monotonic() + 60
        while (logs := cli("logs", "hello", state_dir=state).stdout) == "" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert logs == "hello from ['--from-map', 'extra']\n"  # the container's args follow the mapped entrypoint
        other = cli("up", "--detach", "--image-map", "local/hello:1=python other.py", state_dir=state, cwd=tmp_path)
        assert other.returncode == 1 and "another image map" in other.stderr
    finally:
        cli("down", state_dir=state)
