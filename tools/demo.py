"""``make demo``: the nightly pipeline ``nightly_training`` end to end on a local cluster, through a spot reclaim.

Starts a local cluster (its own process) whose image map runs the digits trainer image as the local Python, points a
fresh Airflow home (SQLite) at it through the explicitly named connection ``local_cluster``, and runs
``dags/nightly_training.py`` with ``airflow dags test``: prepare → sweep → train → evaluate → publish → serve (the
model rolled out to a KServe InferenceService on the local cluster, and a smoke request answered). While the
final training (two torchft replica groups) runs, once both are in the quorum and a checkpoint exists, one replica
group's node is reclaimed GKE-style (``tools/demo_reclaim.py``): the demo prints whether the other replica group was
untouched (same pod uid, restartCount 0) and the replacement's torchft line saying it healed from the live peer.
Progress is printed stage by stage and trial by trial (``tools/demo_progress.py``); at the end the run report, and
where the plot, the model and the checkpoints are. The cluster and the Airflow home are removed; the artefacts stay
under ``--output`` (default: a new temporary directory). Exits non-zero if the pipeline did not succeed, a survivor
of the reclaim was restarted or replaced, or the replacement did not heal from a peer.
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
from demo_reclaim import Reclaim

from airflow_elastic.localcluster import ClusterConfig, LocalCluster
from airflow_elastic.localcluster.imagemap import parse_image_map
from airflow_elastic.serving import publishing

ROOT = Path(__file__).resolve().parent.parent
AIRFLOW = str(Path(sys.executable).parent / "airflow")
DAG_ID = "nightly_training"
TASKS = ("previous_sweep", "prepare", "sweep", "train", "evaluate", "publish", "under_review", "promoted", "serve")
#: Skipped unless the promotion rule asks a person (``under_review`` itself runs, and says no).
REVIEW_TASKS = ("approve", "adopt")
DEADLINE = 900  # seconds: bounds a broken run only
STEP_SECONDS = 0.02


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
    # The final training's steps paced to a real model's (nightly_training.DEFAULT_STEP_SECONDS says why): the
    # reclaimed replica group's replacement joins mid-training and heals from its peer.
    conf = {"root": str(storage), "scripts": str(ROOT / "dags" / "scripts"), "final_step_seconds": STEP_SECONDS}

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
            reclaim = Reclaim(cluster, DAG_ID, emit)
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
        events = query(
            db,
            "SELECT a.name, e.source_task_id, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
            "WHERE e.source_dag_id = ? ORDER BY e.id",
            DAG_ID,
        )
    emit(f"task states: {json.dumps(states, sort_keys=True)}")
    for name, task_id, extra in events:  # what Airflow recorded: the Assets' events of the run
        emit(f"asset event: {name} from {task_id}: {extra}")
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
    # The review tasks run only for a candidate in the promotion's grey zone: a first model is promoted by the rule.
    review = {task: states.pop(task, None) for task in REVIEW_TASKS}
    if set(states.values()) != {"success"} or set(review.values()) != {"skipped"} or not published or not served:
        emit("demo: the nightly pipeline did not succeed (see the full output above the report)")
        return 1
    return reclaim_verdict(reclaim, emit)


def reclaim_verdict(reclaim: Reclaim, emit: Any) -> int:
    """What the reclaim showed, plainly; non-zero if it was not injected, a survivor was touched, or the replacement
    did not heal from a live peer."""
    if reclaim.injected is None or reclaim.survivors is None:
        emit("demo: the final training ended before a spot reclaim could be injected")
        return 1
    for line in reclaim.survivors.lines():
        emit(line)
    if reclaim.healed is not None:
        name, line = reclaim.healed
        emit(f"replacement healed from a live peer: {name} logged {line!r}")
    else:
        emit(
            f"demo: replica group {reclaim.injected['replica_group']}'s replacement never logged torchft's healing "
            f"({reclaim.missed_heal()})"
        )
    if reclaim.survivors.problems:
        emit("demo: a survivor of the reclaim was restarted or replaced")
        return 1
    return 0 if reclaim.healed is not None else 1


if __name__ == "__main__":
    sys.exit(main())
