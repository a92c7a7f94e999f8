"""``make demo``: the nightly pipeline ``nightly_training`` end to end on a local cluster, through a spot reclaim.

Starts a local cluster (its own process) whose image map runs the digits trainer image as the local Python, points a
fresh Airflow home (SQLite) at it through the explicitly named connection ``local_cluster``, and runs
``dags/nightly_training.py`` with ``airflow dags test``: prepare → sweep → train → evaluate → publish → serve (the
model rolled out to a KServe InferenceService on the local cluster, and a smoke request answered). While the
final training runs, once it has written a checkpoint, one of its spot workers' nodes is reclaimed GKE-style. Progress
is printed stage by stage and trial by trial (``tools/demo_progress.py``); at the end the run report, and where the
plot, the model and the checkpoints are. The cluster and the Airflow home are removed; the artefacts stay under
``--output`` (default: a new temporary directory). Exits non-zero if the pipeline did not succeed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from demo_progress import Progress

from airflow_elastic.contract import checkpoints
from airflow_elastic.localcluster import ClusterConfig, LocalCluster
from airflow_elastic.localcluster.imagemap import parse_image_map
from airflow_elastic.serving import publishing

ROOT = Path(__file__).resolve().parent.parent
AIRFLOW = str(Path(sys.executable).parent / "airflow")
DAG_ID = "nightly_training"
TASKS = ("previous_sweep", "prepare", "sweep", "train", "evaluate", "publish", "promoted", "serve")
#: The reclaim comes once the final training's latest complete checkpoint is at least this step.
RECLAIM_AT_STEP = 1
DEADLINE = 900  # seconds: bounds a broken run only


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


class Reclaim(threading.Thread):
    """Reclaims the node of one running spot worker of the final training, GKE-style, once that training has
    written a complete checkpoint (an observed step, not a timer)."""

    def __init__(self, cluster: LocalCluster, emit: Any) -> None:
        super().__init__(daemon=True)
        self.cluster, self.emit = cluster, emit
        self.stop = threading.Event()
        self.injected: dict[str, Any] | None = None

    def run(self) -> None:
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=str(self.cluster.kubeconfig))
        core = client.CoreV1Api(api)
        selector = f"airflow-elastic.io/dag-id={DAG_ID},airflow-elastic.io/task-id=train,airflow-elastic.io/role=worker"
        try:
            while not self.stop.wait(0.2):
                try:
                    pods = core.list_namespaced_pod("default", label_selector=selector).items
                except Exception:  # the API server is busy or going away: look again
                    continue
                running = [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
                step = self._checkpoint_step(running)
                if running and step is not None and step >= RECLAIM_AT_STEP:
                    pod = running[0]
                    self.cluster.preempt_node(
                        pod.spec.node_name, style="gke", grace_seconds=1, delete_after=1, replace_after=0.5
                    )
                    self.injected = {"node": pod.spec.node_name, "pod": pod.metadata.name, "step": step}
                    self.emit(
                        f"[train] injected: spot reclaim of node {pod.spec.node_name} (worker pod "
                        f"{pod.metadata.name}) after checkpoint step {step}"
                    )
                    return
        finally:
            api.close()

    @staticmethod
    def _checkpoint_step(pods: list[Any]) -> int | None:
        for pod in pods:
            env = {e.name: e.value for e in pod.spec.containers[0].env or [] if e.value is not None}
            uri = env.get("AE_CHECKPOINT_URI")
            if uri:
                latest = checkpoints.latest_complete(None, uri)
                return latest.step if latest is not None else None
        return None


def query(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return connection.execute(sql, args).fetchall()
    finally:
        connection.close()


def xcom(db: Path, task_id: str) -> Any:
    rows = query(
        db, "SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND key = 'return_value'", DAG_ID, task_id
    )
    if not rows or rows[0][0] is None:
        return None
    value = json.loads(rows[0][0])
    return json.loads(value) if isinstance(value, str) else value


def run_pipeline(env: dict[str, str], conf: dict[str, Any], log: Path, progress: Progress) -> int:
    """``airflow dags test`` with its output fed to ``progress`` (and kept whole in ``log``); its exit status."""
    command = [AIRFLOW, "dags", "test", DAG_ID, "--conf", json.dumps(conf)]
    with open(log, "w") as keep:
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        timer = threading.Timer(DEADLINE, process.kill)
        timer.start()
        try:
            assert process.stdout is not None
            for line in process.stdout:
                keep.write(line)
                progress.feed(line)
            return process.wait()
        finally:
            timer.cancel()
            if process.poll() is None:  # the demo was interrupted: the DAG run goes with it
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, help="where the models, reports and checkpoints stay (default: new)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: stop the DAG run and the cluster too
    output = (args.output or Path(tempfile.mkdtemp(prefix="airflow-elastic-demo-"))).resolve()
    output.mkdir(parents=True, exist_ok=True)
    storage, log = output / "storage", output / "airflow-dags-test.log"
    image_map = parse_image_map([str(ROOT / "dags" / "image-map.yaml")], ROOT)
    image_map = {image: [sys.executable if a == "python" else a for a in argv] for image, argv in image_map.items()}
    conf = {"root": str(storage), "scripts": str(ROOT / "dags" / "scripts")}

    def emit(text: str) -> None:
        print(text, flush=True)

    with tempfile.TemporaryDirectory(prefix="airflow-elastic-demo-") as tmp:
        home = Path(tmp) / "airflow"
        with LocalCluster(Path(tmp) / "cluster", config=ClusterConfig(image_map=image_map)) as cluster:
            emit(f"local cluster up at {cluster.url}")
            env = airflow_env(home, cluster.kubeconfig)
            emit("migrating a fresh Airflow metadata DB (SQLite) ...")
            migrated = subprocess.run([AIRFLOW, "db", "migrate"], env=env, capture_output=True, text=True)
            if migrated.returncode != 0:
                emit(f"demo: airflow db migrate failed:\n{(migrated.stdout + migrated.stderr)[-3000:]}")
                return 1
            emit(f"airflow dags test {DAG_ID} --conf '{json.dumps(conf)}' (full output: {log})")
            reclaim = Reclaim(cluster, emit)
            reclaim.start()
            started = time.monotonic()
            progress = Progress(TASKS, emit=emit)
            status = run_pipeline(env, conf, log, progress)
            reclaim.stop.set()
            reclaim.join(timeout=10)
            emit(f"airflow dags test exited {status} after {time.monotonic() - started:.0f} s; stopping the cluster")
        db = home / "airflow.db"
        states = dict(query(db, "SELECT task_id, state FROM task_instance WHERE dag_id = ?", DAG_ID))
        tries = dict(query(db, "SELECT task_id, try_number FROM task_instance WHERE dag_id = ?", DAG_ID))
        published = xcom(db, "publish")
        served = xcom(db, "serve")
        labels = ((xcom(db, "evaluate") or {}).get("metrics") or {}).get("smoke_labels")
    emit(f"task states: {json.dumps(states, sort_keys=True)}")
    emit(f"final training: try {tries.get('train')}; reclaim injected: {json.dumps(reclaim.injected)}")
    if published:
        emit("run report:")
        for line in publishing.report_lines(published):
            emit(f"  {line}")
    if served:
        emit(
            f"serving: InferenceService {served['namespace']}/{served['name']} serves {served['storage_uri']} "
            f"({served['replicas']} replica(s), {served['mode']} mode) at {served['url']}"
        )
        rows = (served.get("smoke_response") or {}).get("predictions") or []
        predicted = [max(range(len(row)), key=row.__getitem__) for row in rows if isinstance(row, list) and row]
        emit(f"  smoke request through the service proxy: test digits {labels} -> predicted {predicted}")
    emit(f"artefacts under {storage}")
    if set(states.values()) != {"success"} or not published or not served:
        emit("demo: the nightly pipeline did not succeed (see the full output above the report)")
        return 1
    if reclaim.injected is None:
        emit("demo: the final training ended before a spot reclaim could be injected")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
