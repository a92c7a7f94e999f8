"""``dags/example_ray_sweep.py`` end to end under ``airflow dags test``: a Ray Tune sweep (ASHA over an MLP on the
digits) as one RayJob on the local cluster's KubeRay, a real Ray 2.60 head and a spot worker, losing both in one run:

1. the spot worker's node reclaimed (GKE style, the node then replaced) once a trial has checkpointed: KubeRay
   replaces the worker, Tune resumes the interrupted trials from their checkpoints;
2. later, the head's node shut down (GKE style, the node replaced) while one trial has finished and another
   trains: KubeRay starts a new head, the submitter submits the Ray job again, and the driver restores the
   experiment (``Tuner.restore``): the finished trial is not run again, the others continue from their
   checkpoints.

Try 1 succeeds, both losses are listed and charged as preemptions, no trial ever starts over from its first epoch,
and the sweep's report is the native sweep's."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from airflow_elastic.localcluster import LocalCluster
from airflow_elastic.localcluster.images import ray_environment
from airflow_elastic.ray.tune import read_experiment
from tests.support.airflow_env import dags_test, tail, task_states
from tests.support.images import png_size
from tests.support.paths import ROOT
from tests.support.raynodes import IMAGE
from tests.support.training_group_helpers import xcom
from tests.support.waiting import wait_for

DAG_ID = "example_ray_sweep"
#: Ten epochs of two seconds: ASHA (max_t 10, grace 2) keeps the best trials 20 s, time to lose the worker midway.
EPOCHS, EPOCH_SECONDS = 10, 2.0
#: The reclaim's shutdown grace (GKE gives pods at most what the node's shutdown allows; 15 s by default here).
GRACE = 2.0


def reclaim_the_worker_after_a_checkpoint(core: Any, namespace: str, storage: Path, done: threading.Event) -> Any:
    """Once a trial is past ASHA's first rung (its second checkpoint) with at least six epochs to go, the running Ray
    worker pod (``None`` if the sweep ended first): the trial is interrupted with checkpoints to resume from."""

    def midway() -> bool:
        return any(
            (trial / "checkpoint_000001").is_dir() and not (trial / "checkpoint_000003").exists()
            for trial in storage.glob("*/*")
        )

    wait_for(lambda: done.is_set() or midway(), timeout=300, what="a trial midway")
    workers = core.list_namespaced_pod(namespace, label_selector="ray.io/node-type=worker").items
    running = [p for p in workers if p.status.phase == "Running" and p.spec.node_name]
    return None if done.is_set() or not running else running[0]


def finished_and_training(storage: Path) -> dict[str, Any] | None:
    """The moment to lose the head: Tune's saved state (what a restore starts from) has a trial ``TERMINATED`` and
    another ``RUNNING`` that has checkpointed; then each trial's ``result.json`` rows by its logdir, and which
    finished."""
    try:
        (experiment,) = [path for path in storage.iterdir() if path.is_dir()]
        state = read_experiment(str(experiment))
        trials = state.trials()
    except (FileNotFoundError, ValueError):  # not written yet, or caught mid-write
        return None
    status = {trial["relative_logdir"]: trial["status"] for trial, _ in trials}
    finished = [logdir for logdir, s in status.items() if s == "TERMINATED"]
    training = [d for d, s in status.items() if s == "RUNNING" and any((experiment / d).glob("checkpoint_*"))]
    if not (finished and training):
        return None
    # Tune writes the state and each trial's result.json separately: a trial the state already has TERMINATED may not
    # have its last rows yet (seen: none at all). The moment is when both agree.
    reported = {t["relative_logdir"]: (r.get("last_result") or {}).get("training_iteration", 0) for t, r in trials}
    for logdir in finished:
        rows = state.results.get(logdir, [])
        if max((row.get("training_iteration", 0) for row in rows), default=0) < reported[logdir]:
            return None
    return {"rows": {d: len(rows) for d, rows in state.results.items()}, "finished": finished, "at": experiment}


def disrupt(
    cluster: LocalCluster, core: Any, namespace: str, storage: Path, done: threading.Event, seen: dict[str, Any]
) -> None:
    """Reclaim the Ray worker's spot node midway through a trial (GKE: SIGKILL ``GRACE`` s after SIGTERM, Ray's
    processes work on until then; the node replaced), then, once a trial finished while another trains, shut the
    head's node down the same way (a GKE node shutdown, as a maintenance event or a node upgrade does to
    on-demand nodes)."""
    worker = reclaim_the_worker_after_a_checkpoint(core, namespace, storage, done)
    if worker is None:
        return
    seen["pod"], seen["node"] = worker.metadata.name, worker.spec.node_name
    cluster.preempt_node(worker.spec.node_name, "gke", grace_seconds=GRACE, replace_after=1)
    moment = wait_for(lambda: done.is_set() or finished_and_training(storage), timeout=300, what="a trial finished")
    heads = core.list_namespaced_pod(namespace, label_selector="ray.io/node-type=head").items
    head = next((p for p in heads if p.status.phase == "Running" and p.spec.node_name), None)
    if done.is_set() or head is None:
        return
    seen["moment"], seen["head"] = moment, head.metadata.name
    cluster.preempt_node(head.spec.node_name, "gke", grace_seconds=1, delete_after=1, replace_after=1)


def test_the_ray_sweep_absorbs_a_reclaimed_worker_and_a_lost_head_and_reports_like_the_native_sweep(
    cluster_airflow_env: dict[str, str],
    airflow_db: Any,
    local_cluster: LocalCluster,
    core: Any,
    custom: Any,
    namespace: str,
    tmp_path: Path,
) -> None:
    try:
        ray_environment(IMAGE)
    except LookupError as err:
        pytest.skip(str(err))
    env = cluster_airflow_env | {"AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags")}
    storage = tmp_path / "ray-tune"
    done, seen = threading.Event(), {}
    disrupter = threading.Thread(target=disrupt, args=(local_cluster, core, namespace, storage, done, seen))
    disrupter.start()
    try:
        conf = {"trials": 4, "epochs": EPOCHS, "epoch_seconds": EPOCH_SECONDS, "storage": str(storage)}
        result = dags_test(DAG_ID, env, conf, timeout=600)
    finally:
        done.set()
        disrupter.join()
    assert task_states(airflow_db, DAG_ID) == {"sweep": "success"}, tail(result.stdout, 200)
    assert seen.get("node") and seen.get("head"), f"the sweep ended before both losses: {seen}"
    out = xcom(airflow_db, DAG_ID, "sweep")
    assert out["job_status"] == "SUCCEEDED", out
    # Both losses absorbed (try 1 succeeded), charged and listed with their causes.
    lost = {p["role"]: p for p in out["preemptions"]}
    assert sorted(lost) == ["head", "worker"] and len(out["preemptions"]) == 2, out["preemptions"]
    assert lost["worker"]["pod"] == seen["pod"] and "reclaim" in lost["worker"]["cause"], lost
    assert (lost["head"]["pod"], lost["head"]["cause"]) == (seen["head"], "spot_reclaim"), lost  # the shutdown rule
    assert "KubeRay starts a new head" in result.stdout, tail(result.stdout, 200)
    # The same RayJob carried on: KubeRay's submitter submitted the Ray job again on the new head (only a submitter
    # out of retries would make the task submit a second RayJob).
    rayjobs = custom.list_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs")["items"]
    assert [r["metadata"]["name"] for r in rayjobs] == [out["name"]], [r.get("status") for r in rayjobs]
    # The driver ran again on the new head and restored the experiment; Tune restarted what the lost worker ran
    # from its checkpoint, and every trial ended.
    assert "restoring the Tune experiment at" in result.stdout, tail(result.stdout, 200)
    assert "resuming from the checkpoint of epoch" in result.stdout, tail(result.stdout, 200)
    sweep = out["sweep"]
    trials = sweep["trials"]
    assert [t["number"] for t in trials] == [1, 2, 3, 4], trials
    assert all(t["state"] in ("complete", "pruned") for t in trials), trials
    assert sum(t["preemptions"] for t in trials) >= 1, trials  # the worker's; a head loss's restore may not show
    # A trial the saved state had finished was not run again; no trial ever started over from its first epoch.
    moment, final = seen["moment"], read_experiment(str(seen["moment"]["at"]))
    for logdir in moment["finished"]:
        assert len(final.results[logdir]) == moment["rows"][logdir], (logdir, final.results[logdir])
    for logdir, rows in final.results.items():
        assert [r["epoch"] for r in rows].count(1) == 1, (logdir, [r["epoch"] for r in rows])
    # A real model learned: validation log loss far below chance (ln 10 = 2.3).
    assert sweep["best_value"] < 1.0 and set(sweep["best_params"]) == {"lr", "hidden", "layers", "alpha"}, sweep
    # The driver's best is the sweep's: among the trials that ran as many iterations as any that ended (a trial ASHA
    # stopped may have ended lower at its rung than a complete one did at its last epoch; once, after the lost head,
    # Tune ended the longest trial at 9 of 10 epochs).
    assert out["reported"]["val_loss"] == pytest.approx(sweep["best_value"]), (out["reported"], sweep)
    assert png_size(Path(sweep["report"]["png"]))[0] > 100
    assert Path(sweep["report"]["csv"]).read_text().count("\n") == 5  # a header and four trials
