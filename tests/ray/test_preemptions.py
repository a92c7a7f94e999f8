"""The Ray pods a RayJob's cluster lost: head and worker pods judged once each by the preemption classifier (a
reclaim is charged, an OOM is not, a worker deleted before it started is not), and the budget's message.

The pods are labelled as KubeRay v1.7.0 labels them (``ray-operator/controllers/ray/utils/constant.go``:
``ray.io/cluster``, ``ray.io/node-type``); a graceful node shutdown (a GKE spot reclaim) leaves the pod reason
``Terminated``.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_elastic import SpecError
from airflow_elastic.ray.preemptions import (
    LossWatch,
    LostHead,
    charge,
    charged_in,
    exhausted,
    judge,
    node_names,
    worker_pods,
)
from airflow_elastic.ray.tune import TuneSweep

CLUSTER = "tune-k3x9q2-kd8s2"
END = "2026-12-02T10:05:00Z"


def ray_pod(name: str, node_type: str = "worker", *, how: str = "running", cluster: str = CLUSTER) -> dict[str, Any]:
    """A Ray pod: ``running``, ``reclaimed`` (graceful node shutdown), ``oom``, ``deleting`` (being deleted, its
    container still running) or ``pending-deleted`` (deleted before it started)."""
    meta: dict[str, Any] = {
        "name": name,
        "uid": f"uid-{name}",
        "labels": {"ray.io/cluster": cluster, "ray.io/node-type": node_type},
    }
    status: dict[str, Any] = {
        "phase": "Running",
        "containerStatuses": [{"name": "ray-worker", "state": {"running": {}}}],
    }
    if how == "reclaimed":
        status = {
            "phase": "Failed",
            "reason": "Terminated",
            "message": "Pod was terminated in response to imminent node shutdown.",
            "containerStatuses": [
                {"name": "ray-worker", "state": {"terminated": {"exitCode": 143, "reason": "Error", "finishedAt": END}}}
            ],
        }
    elif how == "oom":
        status = {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "ray-worker",
                    "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": END}},
                }
            ],
        }
    elif how == "deleting":
        meta["deletionTimestamp"] = END
    elif how == "pending-deleted":
        status = {"phase": "Pending", "containerStatuses": [{"name": "ray-worker", "state": {"waiting": {}}}]}
        meta["deletionTimestamp"] = END
    return {"metadata": meta, "spec": {"nodeName": f"node-{name}"}, "status": status}


def test_worker_pods_are_the_clusters_workers():
    pods = [ray_pod("h", "head"), ray_pod("w1"), ray_pod("w2", cluster="other")]
    assert [p["metadata"]["name"] for p in worker_pods(pods, CLUSTER)] == ["w1"]
    assert node_names(worker_pods(pods, CLUSTER)) == {"node-w1"}


def test_each_stopped_pod_is_judged_once_a_reclaim_charged_an_oom_not():
    watch = LossWatch("tune-k3x9q2", budget=5)
    pods = [ray_pod("w1", how="reclaimed"), ray_pod("w2", how="oom"), ray_pod("w3"), ray_pod("h", "head", how="oom")]
    pods.append(ray_pod("other", how="reclaimed", cluster="another"))
    first = watch.judge(watch.pending(pods, CLUSTER), nodes={})
    assert [(loss.role, loss.pod, loss.preemption, loss.cause) for loss in first] == [
        ("head", "h", False, "oom"),  # KubeRay replaces it and resubmits the job; not the platform's doing
        ("worker", "w1", True, "spot_reclaim"),
        ("worker", "w2", False, "oom"),
    ]
    assert first[1].at == END and first[1].rayjob == "tune-k3x9q2"
    assert watch.pending(pods, CLUSTER) == [] and watch.judge([pods[0]]) == []  # seen: never again
    assert watch.preemptions == 1 and not watch.exceeded
    assert [loss["uid"] for loss in watch.payload()] == ["uid-h", "uid-w1", "uid-w2"]


def test_a_reclaimed_head_is_charged_while_the_rayjob_runs_and_once_more_only_if_it_is_another_pod():
    watch = LossWatch("r", budget=1)
    (head,) = watch.judge(watch.pending([ray_pod("h1", "head", how="reclaimed"), ray_pod("h2", "head")], CLUSTER))
    assert (head.role, head.preemption, head.cause) == ("head", True, "spot_reclaim")
    assert "KubeRay starts a new head" in head.describe() and not watch.exceeded
    # The RayJob failing later (the submitter out of retries) names the same head: charged once.
    failure = {"preemption": True, "loss": head.to_json()}
    charged, new = charge([], watch.payload(), failure, rayjob="r")
    assert [entry["uid"] for entry in charged] == ["uid-h1"] and [loss.uid for loss in new] == ["uid-h1"]
    # The new head reclaimed as well: one more than the budget.
    watch.judge(watch.pending([ray_pod("h2", "head", how="reclaimed")], CLUSTER))
    assert watch.exceeded and watch.preemptions == 2


def test_the_budget_is_exceeded_by_one_more_preemption_than_it_allows():
    watch = LossWatch("r", budget=1)
    watch.judge(watch.pending([ray_pod("w1", how="reclaimed")], CLUSTER))
    assert not watch.exceeded
    watch.judge(watch.pending([ray_pod("w2", how="reclaimed")], CLUSTER))
    assert watch.exceeded and LossWatch("r").exceeded is False  # no budget: never


def test_a_worker_being_deleted_waits_for_its_final_state_and_one_never_started_is_not_charged():
    watch = LossWatch("r")
    assert watch.judge(watch.pending([ray_pod("w1", how="deleting")], CLUSTER)) == []  # not final, no preemption yet
    gone = watch.judge(watch.pending([ray_pod("w1", how="deleting")], CLUSTER, gone=["w1"]), gone=["w1"])
    assert len(gone) == 1 and not gone[0].preemption  # deleted, no disruption evidence: not a preemption
    (never,) = watch.judge(watch.pending([ray_pod("w9", how="pending-deleted")], CLUSTER, ["w9"]), gone=["w9"])
    assert never.preemption is False and "deleted-before-start" in never.description


def test_a_lost_worker_is_a_preemption_when_its_spot_node_is_gone():
    pod = ray_pod("w1", how="oom")
    pod["status"]["containerStatuses"][0]["state"]["terminated"].update(reason="Error", exitCode=1)
    pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC"}]
    loss = judge(pod, "worker", "r", gone=True, nodes={"node-w1": None})
    assert loss.preemption and loss.cause == "node_loss"


def test_the_budget_message_names_it_and_every_preemption():
    charged = [
        {"rayjob": "a", "role": "worker", "pod": "w1", "cause": "spot_reclaim", "at": END},
        {"rayjob": "a", "role": "head", "pod": "h", "cause": "eviction", "at": ""},
    ]
    text = exhausted(1, charged)
    assert "max_preemptions=1" in text and "2 preemption(s)" in text
    assert f"RayJob a: worker pod w1 lost to spot_reclaim at {END}" in text and "head pod h lost to eviction" in text


def test_a_verdict_charges_each_preemption_once_and_names_an_unnamed_lost_head():
    reclaim = {"rayjob": "j", "role": "worker", "pod": "w1", "uid": "u1", "cause": "spot_reclaim", "preemption": True}
    oom = {**reclaim, "pod": "w2", "uid": "u2", "cause": "oom", "preemption": False}
    charged, new = charge([], [reclaim, oom, reclaim], None, rayjob="j")
    assert [c["uid"] for c in charged] == ["u1"] and [loss.uid for loss in new] == ["u1", "u2"]
    assert "preemption" not in charged[0]  # the record keeps the charge, not the flag
    failure = {"kind": "cluster_lost", "preemption": True, "description": "the head's node is gone"}
    again, new = charge(charged, [reclaim], failure, rayjob="j", uid="uid-j", end_time="T")
    assert [c["uid"] for c in again] == ["u1", "uid-j:cluster"] and [loss.role for loss in new] == ["head"]
    assert again[1]["description"] == "the head's node is gone" and again[1]["at"] == "T"
    assert charged_in({"preemptions": again}) == again and charged_in({"preemptions": again, "ended": True}) == []
    lost = LostHead("RayJob ns/j", again[1], 2)
    assert lost.message(3) == "RayJob ns/j lost its head pod to cluster_lost (preemption 2/3)"
    assert lost.verb == "resubmitting as" and LostHead("w", {}, 1, resubmit=False).verb == "already resubmitted as"


def test_tune_sweep_is_validated_and_reports_under_the_experiment_by_default():
    tune = TuneSweep("s3://b/ray/digits", "val_loss")
    assert tune.report == "s3://b/ray/digits/report" and tune.mode == "min"
    assert TuneSweep("/x", "acc", mode="max", report_uri="/r").report == "/r"
    with pytest.raises(SpecError) as raised:
        TuneSweep("", "val_loss", mode="lowest", max_iterations=0)
    text = str(raised.value)
    assert "tune.experiment" in text and "tune.mode" in text and "tune.max_iterations" in text
