"""``HyperparameterSweepOperator`` under ``airflow dags test`` against the local cluster (``dags/sweep_dags.py``).

What ran is read from the cluster, not from the operator: a watch on the namespace's JobSets records when each trial
group was created and when it finished or went away (:class:`JobSetRecorder`), and the request log shows every
create and delete.
"""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from airflow_elastic.contract import checkpoints
from airflow_elastic.localcluster import LocalCluster
from tests.support.airflow_env import dags_test, tail, task_states
from tests.support.images import png_size
from tests.support.statsd import Received, StatsdListener
from tests.support.training_group_helpers import JOBSET_RESOURCE, JOBSETS, pods_of, xcom

TRIAL_LABEL = "airflow-elastic.io/trial"
SWEEP_LABEL = "airflow-elastic.io/sweep"


class JobSetRecorder:
    """Watches a namespace's JobSets from a thread: per JobSet, when it was first seen, when it was first seen
    finished (or deleted), and its labels."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        self.client, self.namespace = api_client, namespace
        self.created: dict[str, float] = {}
        self.ended: dict[str, float] = {}
        self.labels: dict[str, dict[str, str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> JobSetRecorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        from kubernetes import client, watch

        api = client.CustomObjectsApi(self.client)
        version = ""
        while not self._stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(
                    api.list_namespaced_custom_object,
                    *JOBSETS[:2],
                    self.namespace,
                    JOBSETS[2],
                    resource_version=version or None,
                    timeout_seconds=2,
                ):
                    obj, now = event["object"], time.monotonic()
                    meta = obj.get("metadata") or {}
                    name, version = meta.get("name", ""), meta.get("resourceVersion", version)
                    self.created.setdefault(name, now)
                    self.labels[name] = meta.get("labels") or {}
                    done = any(
                        c.get("type") in ("Completed", "Failed") and c.get("status") == "True"
                        for c in (obj.get("status") or {}).get("conditions") or []
                    )
                    if done or event["type"] == "DELETED" or meta.get("deletionTimestamp"):
                        self.ended.setdefault(name, now)
                    if self._stop.is_set():
                        break
            except Exception:  # a dropped watch: list again
                version = ""
            finally:
                stream.stop()

    def max_concurrent(self) -> int:
        """The most trial JobSets alive (created, not yet finished) at once."""
        points = [(t, 1) for t in self.created.values()] + [(t, -1) for t in self.ended.values()]
        live = peak = 0
        for _, change in sorted(points, key=lambda p: (p[0], p[1])):
            live += change
            peak = max(peak, live)
        return peak

    def trials(self) -> dict[str, int]:
        """JobSet name -> trial number."""
        return {n: int(labels[TRIAL_LABEL]) for n, labels in self.labels.items() if TRIAL_LABEL in labels}


def creates(local_cluster: LocalCluster, namespace: str, mark: int) -> list[dict[str, Any]]:
    return local_cluster.requests(since=mark, verb="create", resource=JOBSET_RESOURCE, namespace=namespace)


def test_tpe_sweep_finds_the_optimum_within_max_parallel(
    cluster_airflow_env, airflow_db, namespace, api_client, local_cluster: LocalCluster, tmp_path: Path
):
    base = tmp_path / "ckpt"
    mark = local_cluster.request_count()
    with JobSetRecorder(api_client, namespace) as recorder:
        result = dags_test("sweep_tpe", cluster_airflow_env, {"namespace": namespace, "base": str(base)})
    assert task_states(airflow_db, "sweep_tpe") == {"tpe": "success"}, tail(result.stdout, 200)
    out = xcom(airflow_db, "sweep_tpe", "tpe")
    trials = out["trials"]
    assert [t["number"] for t in trials] == list(range(1, 13)), trials
    assert all(t["state"] == "complete" for t in trials), trials
    # The known optimum (x=0.3, y=-0.2, loss 0) is found within tolerance in 12 trials.
    assert out["best_value"] < 0.1, out
    assert abs(out["best_params"]["x"] - 0.3) < 0.3 and abs(out["best_params"]["y"] + 0.2) < 0.3, out
    # Never more than max_parallel=3 trial groups at once, by the cluster's own account; and slots were used.
    assert recorder.max_concurrent() <= 3, (recorder.created, recorder.ended)
    assert recorder.max_concurrent() >= 2, (recorder.created, recorder.ended)
    # Every resumption re-entered from the stored history: each trial's group was created exactly once.
    made = creates(local_cluster, namespace, mark)
    assert len(made) == 12 and sorted(recorder.trials().values()) == list(range(1, 13)), (made, recorder.trials())
    assert len({recorder.labels[n][SWEEP_LABEL] for n in recorder.trials()}) == 1, recorder.labels
    # The report: a table, the JSON and a real PNG under the group's checkpoint URI.
    report = out["report"]
    assert set(report) == {"csv", "json", "png"}
    assert Path(report["csv"]).read_text().count("\n") >= 12
    width, height = png_size(Path(report["png"]))
    assert width > 100 and height > 100
    assert "trial 12/12" in result.stdout and "best" in result.stdout
    # Intermediate values are progress lines for a person, never the protocol's marker.
    assert re.search(r"\[trial \d+\] \[\S+\] step \d+: loss=", result.stdout) and "AE_INTERMEDIATE" not in result.stdout
    # The triggers ran in this process (dags test): their lines were written once, not again from the events.
    assert "Output shown while the task was deferred" not in result.stdout
    # The UI's buttons: Airflow evaluated the links when the task ended and keeps them in XCom.
    assert xcom(airflow_db, "sweep_tpe", "tpe", "_link_SweepReportLink") == Path(report["json"]).as_uri()
    assert xcom(airflow_db, "sweep_tpe", "tpe", "_link_SweepPlotLink") == Path(report["png"]).as_uri()


def _reclaim_when_checkpointed(
    cluster: LocalCluster, api_client: Any, namespace: str, trial_dir: Path, done: threading.Event, log: list[str]
) -> None:
    """Reclaim the node of the preempted sweep's trial once its checkpoints reach epoch 2 (an observed step)."""
    from kubernetes import client

    api = client.CustomObjectsApi(api_client)
    while not done.is_set():
        dirs = sorted(trial_dir.parent.glob(f"*/{trial_dir.name}-*"))  # <sweep>/trial-<n>-<params digest>
        latest = checkpoints.latest_complete(None, str(dirs[0])) if dirs else None
        if latest is not None and latest.step >= 2:
            items = api.list_namespaced_custom_object(*JOBSETS[:2], namespace, JOBSETS[2])["items"]
            names = [js["metadata"]["name"] for js in items if js["metadata"]["name"].startswith("sw-preempt-t1-")]
            running = [p for n in names for p in pods_of(api_client, namespace, n) if p.status.phase == "Running"]
            if running:
                node = running[0].spec.node_name
                cluster.preempt_node(node, style="gke", grace_seconds=1, delete_after=1, replace_after=0.5)
                log.append(f"reclaimed {node} at epoch {latest.step}")
                return
        time.sleep(0.1)


def test_failures_median_stopping_and_preemption(
    cluster_airflow_env, airflow_db, namespace, api_client, local_cluster: LocalCluster, tmp_path: Path
):
    base = tmp_path / "ckpt"
    done, injected = threading.Event(), []
    mark = local_cluster.request_count()
    with StatsdListener() as statsd, JobSetRecorder(api_client, namespace) as recorder, ThreadPoolExecutor(1) as pool:
        env = {**cluster_airflow_env, **statsd.environment()}  # and the sweeps' metrics (4)
        run = pool.submit(dags_test, "sweep_behaviours", env, {"namespace": namespace, "base": str(base)})
        try:
            _reclaim_when_checkpointed(
                local_cluster, api_client, namespace, base / "sw-preempt" / "trial-1", done, injected
            )
        finally:
            result = run.result()
            done.set()
    out = result.stdout
    states = task_states(airflow_db, "sweep_behaviours")
    assert states == {"failing": "failed", "median": "success", "preempted": "success"}, (injected, tail(out, 200))

    # (1) Trials with x > 0.5 crash: the second failure is one more than max_failed_trials=1; the message lists them.
    assert "more than max_failed_trials=1" in out, tail(out, 200)
    # Two failures may end in the same poll: at least two, every one listed with its cause.
    found = re.search(r"AirflowFailException: The sweep failed: (\d+) trial\(s\) failed", out)
    assert found and int(found.group(1)) >= 2, tail(out, 200)
    assert out[found.start() :][:6000].count("(exit code 3)") >= int(found.group(1)), out[found.start() :]
    assert "diverged" in out  # the crashing trials' own log lines reached the task log, prefixed with the trial
    failing = {n for n, labels in recorder.labels.items() if n.startswith("sw-fail-")}
    assert failing and all(n in recorder.ended for n in failing), (failing, recorder.ended)

    # (2) Median stopping: the grid's last trial (x=3) is clearly worse than the median of the completed ones at the
    # same step, so it is pruned with its last value, and its group deleted before it finished.
    median = xcom(airflow_db, "sweep_behaviours", "median")
    assert [t["state"] for t in median["trials"]] == ["complete", "complete", "complete", "pruned"], median["trials"]
    pruned = median["trials"][3]
    assert pruned["params"] == {"x": 3.0} and pruned["value"] > 5 and pruned["cause"], pruned
    assert max(int(s) for s in pruned["intermediate"]) < 6, pruned  # stopped before its last epoch
    deletes = local_cluster.requests(since=mark, verb="delete", resource=JOBSET_RESOURCE, namespace=namespace)
    assert pruned["jobset"] in {r["name"] for r in deletes}, deletes
    assert median["best_params"]["x"] == 0.3

    # (3) The reclaimed trial resumed (an in-cluster restart from its checkpoint) and was not counted as failed.
    assert len(injected) == 1, (injected, tail(out, 200))
    preempted = xcom(airflow_db, "sweep_behaviours", "preempted")
    [trial] = preempted["trials"]
    assert trial["state"] == "complete" and trial["preemptions"] >= 1, trial
    assert preempted["best_value"] < 1e-9, preempted

    # (4) The metrics each sweep sent as it went, read from a StatsD listener on localhost (Airflow's Stats, tags in
    # the name): trials by state, how many ran, the best value so far, and the verdict.
    sent = statsd.received("airflow.airflow_elastic.sweep.")
    assert {r.tags["dag_id"] for r in sent} == {"sweep_behaviours"}, sent
    assert _trials_by_state(sent, "median") == {"running": 4, "complete": 3, "pruned": 1}, sent
    assert _trials_by_state(sent, "failing")["failed"] >= 2, sent
    assert _last(sent, "median", "best_value") == (median["best_value"], {"objective": "loss", "mode": "min"})
    assert _last(sent, "median", "trials_running")[0] == 0
    assert _last(sent, "median", "finished") == (1, {"outcome": "succeeded"})
    assert _last(sent, "failing", "finished") == (1, {"outcome": "failed"})
    assert _last(sent, "preempted", "best_value")[0] == preempted["best_value"]
    assert _last(sent, "median", "time_to_verdict")[0] > 0


def _trials_by_state(sent: list[Received], task: str) -> dict[str, int]:
    """The ``sweep.trials`` counter of ``task`` summed by state."""
    found: dict[str, int] = {}
    for r in sent:
        if r.tags["task_id"] == task and r.name.endswith(".sweep.trials"):
            found[r.tags["state"]] = found.get(r.tags["state"], 0) + int(r.value)
    return found


def _last(sent: list[Received], task: str, metric: str) -> tuple[float, dict[str, str]]:
    """The last value ``task`` sent of ``sweep.<metric>``, with its own tags (not the task's)."""
    [*_, last] = [r for r in sent if r.tags["task_id"] == task and r.name.endswith(f".sweep.{metric}")]
    return last.value, {k: v for k, v in last.tags.items() if k not in ("dag_id", "task_id")}


def test_sync_mode_warm_start_the_wall_clock_budget_and_all_failed(
    cluster_airflow_env, airflow_db, namespace, local_cluster: LocalCluster, tmp_path: Path
):
    base, mark = tmp_path / "ckpt", local_cluster.request_count()
    result = dags_test("sweep_more", cluster_airflow_env, {"namespace": namespace, "base": str(base)})
    out = result.stdout
    states = task_states(airflow_db, "sweep_more")
    assert states == {"sync": "success", "warm": "success", "budget": "success", "all_failed": "failed"}, tail(out, 200)

    # (1) On the worker (deferrable=False) the same decisions: both grid points ran, side by side.
    sync = xcom(airflow_db, "sweep_more", "sync")
    assert [(t["params"], t["state"]) for t in sync["trials"]] == [({"x": 0.9}, "complete"), ({"x": 0.3}, "complete")]
    assert sync["best_params"] == {"x": 0.3}
    # (2) Warm-started from it: its best parameters are the first trial, then the sampler takes over.
    warm = xcom(airflow_db, "sweep_more", "warm")
    assert warm["trials"][0]["params"] == {"x": 0.3}, warm["trials"]
    assert warm["trials"][1]["params"] != {"x": 0.3}
    # (3) The wall-clock budget: the trials in flight when it ran out were stopped (their groups deleted), the best so
    # far returned, and the log says why; far fewer than 40 trials ran.
    budget = xcom(airflow_db, "sweep_more", "budget")
    stopped = [t for t in budget["trials"] if t["state"] == "stopped"]
    assert stopped and all("max_wall_clock" in t["cause"] for t in stopped), budget["trials"]
    assert any(t["state"] == "complete" for t in budget["trials"]) and len(budget["trials"]) < 40
    assert budget["best_value"] == min(t["value"] for t in budget["trials"] if t["state"] == "complete")
    deletes = {r["name"] for r in local_cluster.requests(since=mark, verb="delete", resource=JOBSET_RESOURCE)}
    assert {t["jobset"] for t in stopped} <= deletes, (stopped, deletes)
    assert "max_wall_clock (10 s) reached" in out
    # (4) Every trial failed (within max_failed_trials): the task fails and says so, with each cause.
    assert "Every trial of the sweep failed (2): trial 1: " in out and "trial 2: " in out, tail(out, 100)
