"""``airflow-elastic cluster up|status|logs|requests|down`` from the shell, with kubectl as the client."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

CLI = str(Path(sys.executable).parent / "airflow-elastic")


def cli(*args: str, state_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, "cluster", *args, "--state-dir", str(state_dir)], capture_output=True, text=True, timeout=120
    )


def test_cluster_lifecycle_from_the_shell(tmp_path: Path):
    state = tmp_path / "cluster"
    started = cli("up", "--detach", state_dir=state)
    try:
        assert started.returncode == 0, started.stderr
        # The hint names an explicit connection; nothing else points Airflow at this cluster.
        hint = next(line for line in started.stdout.splitlines() if "AIRFLOW_CONN_LOCAL_CLUSTER" in line)
        conn = json.loads(hint.split("=", 1)[1].strip("'"))
        assert conn["conn_type"] == "kubernetes" and conn["extra"]["kube_config_path"] == str(state / "kubeconfig")

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
