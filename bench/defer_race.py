"""How often Airflow 3.3's defer race fails a training group whose trigger fires quickly, with the provider's hold
of early verdicts (``[airflow_elastic] defer_exit_hold``, default) against none (``0``: the provider before it), in
one run, on a real deployment.

The race (apache/airflow#71580, #72716): the worker reports the exit of a task that deferred as a *success* up to
``[workers] min_heartbeat_interval`` (5 s) late; if the trigger has fired and the resumed attempt is already queued
or running when the scheduler processes that report, the scheduler fails the try ("state mismatch").

Each configuration gets a fresh Airflow (api-server, scheduler with the LocalExecutor, dag-processor, triggerer on
SQLite, every setting that shapes the window at Airflow's default) against one local cluster, and runs
``bench/scripts/defer_race_dag.py``: ``--tasks`` training groups of one pod that ends a second after it starts,
``retries=0``, so every trigger fires within the window. Printed: per configuration, the task instances that
succeeded and failed, the scheduler's "state mismatch" entries, the run's wall time; and the ratio of hits.

What it leaves out: the scheduler's own load (a busy deployment's slower loop widens the window) and executors other
than the LocalExecutor.

    .venv/bin/python bench/defer_race.py [--tasks 12] [--runs 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_elastic.localcluster import LocalCluster
from tests.support.airflow_env import airflow_environment, kubernetes_connection, migrate_db
from tests.support.processes import AirflowDeployment, deployment_environment, free_port, query

DAG_FILE = Path(__file__).resolve().parent / "scripts" / "defer_race_dag.py"
DAG_ID = "defer_race"
#: The deployment harness shortens heartbeats for tests; the window is what users run with.
DEFAULTS = {"AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "5"}
CONFIGURATIONS = {"no hold (before)": "0", "hold (default)": ""}


def run_once(cluster: LocalCluster, work: Path, hold: str, tasks: int) -> dict[str, float]:
    """One fresh deployment running the DAG once; the counts of its task instances and state mismatches."""
    home = work / f"home-{uuid.uuid4().hex[:6]}"
    db = migrate_db(home)
    dags = home / "dags"
    dags.mkdir()
    (dags / DAG_FILE.name).symlink_to(DAG_FILE)
    base = airflow_environment(
        home, db, connections={"local_cluster": kubernetes_connection(cluster.kubeconfig, "default")}
    )
    env = {
        **deployment_environment(base, dags_folder=dags, api_port=free_port()),
        **DEFAULTS,
        "AIRFLOW__AIRFLOW_ELASTIC__DEFER_EXIT_HOLD": hold,
        "DEFER_RACE_TASKS": str(tasks),
    }
    with AirflowDeployment(home, env, db) as airflow:
        airflow.start_all()
        started = time.monotonic()
        airflow.trigger(DAG_ID, "race", {})
        airflow.wait_until(
            lambda: query(db, "SELECT state FROM dag_run WHERE dag_id = ?", DAG_ID)[0][0] in ("success", "failed"),
            60 + 30 * tasks,
            "the run to end",
        )
        elapsed = time.monotonic() - started
        states = dict(query(db, "SELECT state, COUNT(*) FROM task_instance GROUP BY state"))
        mismatches = query(db, "SELECT COUNT(*) FROM log WHERE event = 'state mismatch'")[0][0]
    return {
        "succeeded": states.get("success", 0),
        "failed": states.get("failed", 0),
        "mismatches": mismatches,
        "seconds": elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=12, help="training groups per run (each defers once)")
    parser.add_argument("--runs", type=int, default=1, help="runs per configuration, alternating")
    args = parser.parse_args()
    totals = {name: {"succeeded": 0, "failed": 0, "mismatches": 0, "seconds": 0.0} for name in CONFIGURATIONS}
    with tempfile.TemporaryDirectory(prefix="defer-race-") as tmp, LocalCluster(Path(tmp) / "cluster") as cluster:
        for run in range(args.runs):
            for name, hold in CONFIGURATIONS.items():
                result = run_once(cluster, Path(tmp), hold, args.tasks)
                print(f"run {run + 1} {name}: {result}", flush=True)
                for key, value in result.items():
                    totals[name][key] += value
    print(f"\n{'configuration':<18} {'deferrals':>9} {'failed':>6} {'mismatch':>8} {'rate':>6} {'s/run':>6}")
    for name, total in totals.items():
        deferrals = total["succeeded"] + total["failed"]
        rate = total["failed"] / deferrals if deferrals else 0.0
        print(
            f"{name:<18} {deferrals:>9.0f} {total['failed']:>6.0f} {total['mismatches']:>8.0f} {rate:>6.1%} "
            f"{total['seconds'] / args.runs:>6.0f}"
        )
    before, after = (totals[name]["failed"] for name in CONFIGURATIONS)
    print(f"\nhits with the hold / without: {after:.0f} / {before:.0f}")


if __name__ == "__main__":
    main()
