"""``make demo``: run the example DAG ``example_training`` with ``airflow dags test`` on a local cluster.

Starts a local cluster (its own process, a temporary state directory) with an image map standing in for the tiny
trainer image's entrypoint, points a fresh Airflow home (SQLite) at it through an explicitly named connection, runs
the DAG, and prints the task states, the trainer's log lines from the task log and the result the task returned.
Everything is removed afterwards.
"""

from __future__ import annotations

import json
import os
import re
import runpy
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from airflow_elastic.localcluster import ClusterConfig, LocalCluster

ROOT = Path(__file__).resolve().parent.parent
AIRFLOW = str(Path(sys.executable).parent / "airflow")
DAG_ID = "example_training"
#: The message of an Airflow task-log line: ``<time> [info     ] <message> [<logger>] loc=<file:line>``.
LOG_MESSAGE = re.compile(r"\[(?:info|warning|error)\s*\] (.*?) \[[\w.]+\] loc=")


def airflow_env(home: Path, kubeconfig: Path) -> dict[str, str]:
    """A private Airflow home whose only route to a cluster is the named connection ``local_cluster``."""
    user_home = home / "user"  # no ~/.kube/config to fall back to
    user_home.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW") and k != "KUBECONFIG"}
    connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig), "namespace": "default"}}
    env.update(
        {
            "HOME": str(user_home),
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__LOGGING__COLORED_CONSOLE_LOG": "False",
            "AIRFLOW_CONN_LOCAL_CLUSTER": json.dumps(connection),
        }
    )
    return env


def run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        sys.exit(f"demo: {' '.join(command[1:3])} failed:\n{(result.stdout + result.stderr)[-3000:]}")
    return result


def results(db: Path) -> tuple[dict[str, str], Any]:
    """Task states of the run and the training task's return value, from the metadata DB."""
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        query = "SELECT task_id, state FROM task_instance WHERE dag_id = ? ORDER BY task_id"
        states = dict(connection.execute(query, (DAG_ID,)))
        row = connection.execute(
            "SELECT value FROM xcom WHERE dag_id = ? AND task_id = 'train' AND key = 'return_value'", (DAG_ID,)
        ).fetchone()
    finally:
        connection.close()
    value = json.loads(row[0]) if row and row[0] else None
    return states, json.loads(value) if isinstance(value, str) else value


def main() -> None:
    examples = runpy.run_path(str(ROOT / "dags" / "example_groups.py"))
    image_map = {examples["TINY_TRAINER_IMAGE"]: [sys.executable, str(ROOT / "dags" / "scripts" / "train_tiny.py")]}
    with tempfile.TemporaryDirectory(prefix="airflow-elastic-demo-") as tmp:
        home = Path(tmp) / "airflow"
        with LocalCluster(Path(tmp) / "cluster", config=ClusterConfig(image_map=image_map)) as cluster:
            print(f"local cluster up at {cluster.url}")
            env = airflow_env(home, cluster.kubeconfig)
            print("migrating a fresh Airflow metadata DB (SQLite) ...", flush=True)
            run([AIRFLOW, "db", "migrate"], env)
            print(f"airflow dags test {DAG_ID} (steps=5) ...", flush=True)
            output = run([AIRFLOW, "dags", "test", DAG_ID, "--conf", json.dumps({"steps": 5})], env).stdout
        print("from the task log (operator, trigger, and the leader's output it streamed):")
        for message in LOG_MESSAGE.findall(output):
            if "tiny-trainer-" in message:
                print(f"  | {message}")
        states, result = results(home / "airflow.db")
        print(f"task states: {states}")
        print(f"result of 'train': {json.dumps(result, indent=2)}")
        if set(states.values()) != {"success"} or not result or not result.get("metrics"):
            sys.exit("demo: the example DAG did not succeed")


if __name__ == "__main__":
    main()
