"""The flagship as a user deploys it: ``dags/nightly_training.py`` unchanged, on a local cluster started with the
examples' image map, run by Airflow's own processes (``tests/support/processes.py``: api-server, scheduler with the
LocalExecutor, dag-processor, triggerer; SQLite), configured only as the README says: the ``local_cluster``
connection and ``nightly_training_<param>`` Variables (the scripts folder as ``cluster up`` prints it, a storage
root, a small night, and a starting deadline that lets a night unpaused in the day start).

Two runs, one after the other (``max_active_runs=1``): the one the scheduler creates for the latest 02:00 when the
DAG is unpaused, and one triggered through the REST API (its conf: a promotion tolerance, so its model is served
too). The triggerer is restarted (SIGTERM, then a new one) while the scheduled run's sweep waits in it.

Airflow keeps its own defaults where the defer race lives: a worker reports a deferring task's exit up to
``[workers] min_heartbeat_interval`` (5 s) late, and a trigger that fires inside that window can fail the
resumed try. The assertions: every task instance of both runs succeeded in try 1; the cluster was asked to create
each trial's and each final training's group and each batch stage's Job exactly once and nothing else of the kind (its
request log); and every trial's output reached the sweep's task log files (the workers' and the triggerers').
Both runs promote their model (the first: nothing published yet; the second: its tolerance), so Airflow records
one event of each of the pipeline's Assets per run (docs/concepts/assets.md), and ``example_batch_scoring``,
scheduled on the model Asset and unpaused beside it, runs on those promotions and scores them.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_elastic.localcluster import ClusterConfig, LocalCluster
from airflow_elastic.localcluster.cli import scripts_variables
from airflow_elastic.localcluster.imagemap import parse_image_map
from tests.support.airflow_env import CLUSTER_CONN_ID, airflow_environment, kubernetes_connection
from tests.support.paths import ROOT
from tests.support.processes import AirflowDeployment, deployment_environment, free_port, query
from tests.support.training_group_helpers import JOBSET_RESOURCE

pytest.importorskip("torch")  # the `examples` extra (part of `dev`)
pytest.importorskip("sklearn")

DAG_ID = "nightly_training"
SCORING = "example_batch_scoring"
API_RUN = "api_run"
TASKS = ("previous_sweep", "prepare", "sweep", "train", "evaluate", "publish", "under_review", "promoted", "serve")
ASSETS = {"nightly_training.digits.data": "prepare", "nightly_training.digits.model": "publish",
          "nightly_training.digits.served": "serve"}  # fmt: skip
#: A small night that still runs every task: trials two at a time, so the sweep defers more than once.
SIZE = {"sweep_epochs": "2", "final_epochs": "2", "max_trials": "3"}
#: ``processes.deployment_environment``'s short settings that would hide what a deployment sees: the worker
#: heartbeat interval (the defer race's window), the task heartbeat timeout (a busy machine's slow worker would be a
#: zombie), DAGs unpaused at creation (the README says to unpause) and the tests' non-deferrable default.
AIRFLOW_DEFAULTS = (
    "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL",
    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION",
    "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE",
)
#: What the scheduler logs when the defer race fails a resumed try.
RACE = "but the task instance's state attribute is"
JOB_RESOURCE = "jobs.batch"
#: The batch stages' Jobs: ``<stage>-<hash>``.
STAGE_JOBS = ("prepare-digits-", "evaluate-digits-")
RUNS_TIMEOUT = 1200


@pytest.fixture
def cluster(tmp_path: Path):
    """A local cluster running the examples' images (``dags/image-map.yaml``), as ``cluster up --image-map`` does."""
    image_map = parse_image_map([str(ROOT / "dags" / "image-map.yaml")], ROOT)
    image_map = {image: [sys.executable if a == "python" else a for a in argv] for image, argv in image_map.items()}
    with LocalCluster(tmp_path / "cluster", config=ClusterConfig(image_map=image_map)) as local:
        yield local


@pytest.fixture
def deployment(airflow_home: Path, airflow_db: Path, cluster: LocalCluster, tmp_path: Path):
    """Airflow's components running ``dags/nightly_training.py`` alone, with the connection and Variables only."""
    dags = airflow_home / "dags"
    dags.mkdir()
    for name in ("nightly_training.py", "nightly_promotion.py"):  # the DAG and its promotion gate, side by side
        (dags / name).symlink_to(ROOT / "dags" / name)
    (dags / f"{SCORING}.py").symlink_to(ROOT / "dags" / f"{SCORING}.py")
    connection = kubernetes_connection(cluster.kubeconfig, "default")  # what `cluster up` prints
    base = airflow_environment(airflow_home, airflow_db, connections={CLUSTER_CONN_ID: connection})
    env = deployment_environment(base, dags_folder=dags, api_port=free_port())
    for key in AIRFLOW_DEFAULTS:
        env.pop(key, None)
    env |= variables(cluster, tmp_path / "storage")
    with AirflowDeployment(airflow_home, env, airflow_db) as airflow:
        airflow.start_all()
        yield airflow
    assert not airflow.leftovers, f"processes outlived their Airflow component: {airflow.leftovers}"


def variables(cluster: LocalCluster, storage: Path) -> dict[str, str]:
    """The Variables the README says to set: the scripts folder exactly as ``cluster up`` prints it, the storage
    root, a small night, and a deadline that lets the night the DAG is unpaused in start now."""
    printed = dict(line.split("=", 1) for line in scripts_variables(cluster.config.image_map))
    found = {name: shlex.split(value)[0] for name, value in printed.items()}
    assert "AIRFLOW_VAR_NIGHTLY_TRAINING_SCRIPTS" in found, printed
    sizes = {f"AIRFLOW_VAR_NIGHTLY_TRAINING_{name.upper()}": value for name, value in SIZE.items()}
    return {
        **found,
        **sizes,
        "AIRFLOW_VAR_NIGHTLY_TRAINING_ROOT": str(storage),
        "AIRFLOW_VAR_NIGHTLY_TRAINING_STARTING_DEADLINE": str(24 * 3600),
    }


@pytest.mark.timeout(RUNS_TIMEOUT + 300)
def test_the_nightly_pipeline_runs_as_shipped_scheduled_and_through_the_api(
    deployment: AirflowDeployment, cluster: LocalCluster
):
    airflow = deployment
    started = time.monotonic()
    for dag_id in (DAG_ID, SCORING):
        airflow.wait_until(
            lambda dag_id=dag_id: query(airflow.db, "SELECT 1 FROM serialized_dag WHERE dag_id = ?", dag_id),
            120,
            f"the dag-processor to serialize {dag_id}",
        )
    airflow.airflow("dags", "unpause", SCORING)  # runs on each promoted model
    airflow.airflow("dags", "unpause", DAG_ID)  # the README's step: the scheduler creates the latest night's run
    scheduled = airflow.wait_until(
        lambda: query(airflow.db, "SELECT run_id FROM dag_run WHERE dag_id = ? AND run_type = 'scheduled'", DAG_ID),
        120,
        "the scheduler to create the run of the latest 02:00",
    )[0][0]
    airflow.trigger(DAG_ID, API_RUN, {"tolerance": 1.0})  # queued behind the scheduled run
    runs = (scheduled, API_RUN)

    # The triggerer is restarted while the scheduled run's sweep waits in it, once a trial's output is flowing.
    old_triggerer = airflow.wait_until(
        lambda: sweep_trigger_holder(airflow, scheduled) if "[trial 1] " in sweep_logs(airflow, scheduled) else None,
        600,
        "the scheduled run's sweep to wait in the triggerer with a trial's output in its log",
        extra=lambda: airflow.task_states(DAG_ID) + "\n" + sweep_logs(airflow, scheduled)[-4000:],
    )
    restart_at = time.monotonic() - started
    airflow.restart("triggerer", signal.SIGTERM)
    new_triggerer = airflow.wait_until(
        lambda: (job := airflow.running_job("TriggererJob")) not in (None, old_triggerer) and job,
        60,
        "a new triggerer to run",
    )

    airflow.wait_until(
        lambda: all(state in ("success", "failed") for state in dag_run_states(airflow, runs).values()),
        RUNS_TIMEOUT,
        "both runs to finish",
        extra=lambda: airflow.task_states(DAG_ID),
    )
    elapsed = time.monotonic() - started
    print(f"runs finished after {elapsed:.0f} s (triggerer {old_triggerer} -> {new_triggerer} at {restart_at:.0f} s)")

    problems = []
    for run_id in runs:
        tries = {task: airflow.task_instance(DAG_ID, run_id, task) for task in TASKS}
        states = {task: (ti.get("state"), ti.get("try_number")) for task, ti in tries.items()}
        if any(value != ("success", 1) for value in states.values()):
            problems.append(f"{run_id}: task instances not all (success, try 1): {states}")
    if not list(sweep_folder(airflow, scheduled).glob(f"attempt=*.log.trigger.{new_triggerer}.log")):
        problems.append(f"the new triggerer (job {new_triggerer}) never ran the scheduled run's sweep")
    problems += group_problems(airflow, cluster, runs)
    problems += trial_output_problems(airflow, runs)
    problems += asset_problems(airflow, runs)
    races = race_lines(airflow)
    assert not problems, "\n".join(problems) + "\nscheduler, defer race:\n" + "\n".join(races) + "\n" + airflow.logs()


# ------------------------------------------------------------------------------------------------------ checks


def group_problems(airflow: AirflowDeployment, cluster: LocalCluster, runs: tuple[str, ...]) -> list[str]:
    """Each trial's and each final training's JobSet, and each batch stage's Job (as the task results name them),
    created once, and no other asked for: a retry or a resumed sweep that started one again shows as a second
    create, or as a name no result holds."""
    expected: dict[str, Counter[str]] = {JOBSET_RESOURCE: Counter(), JOB_RESOURCE: Counter()}
    problems = []
    for run_id in runs:
        results = {task: xcom(airflow, run_id, task) for task in ("sweep", "train", "prepare", "evaluate")}
        if not all(results.values()):
            problems.append(f"{run_id}: results missing, cannot name its groups: {sorted(results)}")
            continue
        trials = results["sweep"]["trials"]
        if len(trials) != int(SIZE["max_trials"]):
            problems.append(f"{run_id}: {len(trials)} trials, not {SIZE['max_trials']}: {trials}")
        expected[JOBSET_RESOURCE].update([trial["jobset"] for trial in trials] + [results["train"]["name"]])
        expected[JOB_RESOURCE].update([results["prepare"]["name"], results["evaluate"]["name"]])
    for resource, wanted in expected.items():
        creates = [
            r
            for r in cluster.requests(verb="create", resource=resource)
            if resource == JOBSET_RESOURCE or r["name"].startswith(STAGE_JOBS)  # not a JobSet's own Jobs
        ]
        created = Counter(r["name"] for r in creates)
        if created != wanted:
            problems.append(
                f"{resource} creates {dict(created)} are not one per result {dict(wanted)}; codes: "
                f"{[(r['name'], r['code']) for r in creates]}"
            )
    return problems


def asset_problems(airflow: AirflowDeployment, runs: tuple[str, ...]) -> list[str]:
    """One event of each Asset per run, from the task that owns it, with the run's version; the scoring DAG ran on
    the model events (two promotions: one or two runs, as the scheduler saw them) and each of its runs succeeded."""
    problems = []
    rows = query(
        airflow.db,
        "SELECT a.name, e.source_task_id, e.source_run_id, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id"
        " WHERE e.source_dag_id = ?",
        DAG_ID,
    )
    got = Counter((name, task, run) for name, task, run, _ in rows)
    wanted = Counter((name, task, run) for name, task in ASSETS.items() for run in runs)
    if got != wanted:
        problems.append(f"asset events {dict(got)} are not one per Asset and run {dict(wanted)}")
    for name, _, run, extra in rows:
        version = (xcom(airflow, run, "publish") or {}).get("version")
        if name.endswith(".model") and json.loads(extra).get("version") != version:
            problems.append(f"{run}: the model event names {extra}, not the published version {version}")
    try:
        scoring = airflow.wait_until(
            lambda: consumed_promotions(airflow) == len(runs) and scoring_states(airflow),
            300,
            f"{SCORING} to run on both promotions",
        )
    except AssertionError as error:
        return [*problems, f"{SCORING}: {str(error)[:2000]}"]
    if set(scoring.values()) != {"success"}:
        problems.append(f"{SCORING} runs did not all succeed: {scoring}")
    return problems


def consumed_promotions(airflow: AirflowDeployment) -> int:
    """Model events that started a run of the scoring DAG."""
    rows = query(
        airflow.db,
        "SELECT COUNT(*) FROM dagrun_asset_event x JOIN dag_run r ON r.id = x.dag_run_id WHERE r.dag_id = ?",
        SCORING,
    )
    return int(rows[0][0])


def scoring_states(airflow: AirflowDeployment) -> dict[str, str] | None:
    """The scoring DAG's runs and their states, once every one has finished (``None`` before)."""
    rows = query(airflow.db, "SELECT run_id, state FROM dag_run WHERE dag_id = ?", SCORING)
    if not rows or any(state not in ("success", "failed") for _, state in rows):
        return None
    return dict(rows)


def trial_output_problems(airflow: AirflowDeployment, runs: tuple[str, ...]) -> list[str]:
    """Every trial's trainer output (its start line, and a finished trial's final metrics) in the sweep's logs."""
    problems = []
    for run_id in runs:
        logs = sweep_logs(airflow, run_id)
        for trial in (xcom(airflow, run_id, "sweep") or {}).get("trials", []):
            n = trial["number"]
            wanted = ["training epochs"] + (["final metrics"] if trial["state"] == "complete" else [])
            missing = [w for w in wanted if not re.search(rf"\[trial {n}\] .*{w}", logs)]
            if missing:
                problems.append(f"{run_id}: trial {n} ({trial['state']}) has no {missing} line in the sweep's logs")
    return problems


def race_lines(airflow: AirflowDeployment) -> list[str]:
    """The scheduler's "state mismatch" lines: the defer race failing a resumed try."""
    lines = []
    for log in sorted(airflow.home.glob("scheduler.*.log")):
        lines += [line for line in log.read_text(errors="replace").splitlines() if RACE in line]
    return lines


# ------------------------------------------------------------------------------------------------------ access


def dag_run_states(airflow: AirflowDeployment, runs: tuple[str, ...]) -> dict[str, str]:
    rows = query(airflow.db, "SELECT run_id, state FROM dag_run WHERE dag_id = ?", DAG_ID)
    return {run_id: state for run_id, state in rows if run_id in runs}


def sweep_folder(airflow: AirflowDeployment, run_id: str) -> Path:
    """Where the sweep's task log files of ``run_id`` are."""
    return airflow.home / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}" / "task_id=sweep"


def sweep_logs(airflow: AirflowDeployment, run_id: str) -> str:
    """The sweep's log files, of every try: the workers' and every triggerer's."""
    paths = sorted(sweep_folder(airflow, run_id).glob("attempt=*.log*"))
    return "\n".join(path.read_text(errors="replace") for path in paths)


def sweep_trigger_holder(airflow: AirflowDeployment, run_id: str) -> int | None:
    """The running triggerer job that holds the deferred sweep's trigger (``None``: not deferred, or nobody yet)."""
    rows = query(
        airflow.db,
        "SELECT t.triggerer_id FROM task_instance ti JOIN trigger t ON t.id = ti.trigger_id "
        "JOIN job j ON j.id = t.triggerer_id WHERE ti.dag_id = ? AND ti.run_id = ? AND ti.task_id = 'sweep' "
        "AND ti.state = 'deferred' AND j.state = 'running'",
        DAG_ID,
        run_id,
    )
    return rows[0][0] if rows else None


def xcom(airflow: AirflowDeployment, run_id: str, task_id: str) -> Any:
    """The task's ``return_value`` in ``run_id``, decoded (``None`` if absent)."""
    rows = query(
        airflow.db,
        "SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = ? AND key = 'return_value'",
        DAG_ID,
        run_id,
        task_id,
    )
    if not rows or rows[0][0] is None:
        return None
    value = json.loads(rows[0][0])
    return json.loads(value) if isinstance(value, str) and value[:1] in '{["' else value
