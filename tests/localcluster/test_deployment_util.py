"""Deployment arithmetic and ReplicaSet pod ranking, as upstream's ``deployment_util.go`` and ``controller_utils.go``
compute them (pure: no cluster), and a ReplicaSet sync on an in-memory store."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from airflow_elastic.localcluster.admission.deployment import DeploymentAdmission
from airflow_elastic.localcluster.admission.pod import PodAdmission
from airflow_elastic.localcluster.clock import Clock
from airflow_elastic.localcluster.components import bootstrap
from airflow_elastic.localcluster.controllers import deploymentprogress as progress
from airflow_elastic.localcluster.controllers import deploymentutil as du
from airflow_elastic.localcluster.controllers.deployment import DeploymentController
from airflow_elastic.localcluster.controllers.replicaset import ReplicaSetController, deletion_order
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.resources import DEPLOYMENTS, PODS, REPLICASETS
from airflow_elastic.localcluster.store import Store


def deployment(replicas: int, surge: Any = "25%", unavailable: Any = "25%", status: Any = None) -> dict[str, Any]:
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}
    spec = {"replicas": replicas, "strategy": strategy, "progressDeadlineSeconds": 600, "template": {}}
    return {"metadata": {"name": "d", "generation": 1}, "spec": spec, "status": status or {}}


def rs(replicas: int, available: int = 0, created: str = "2026-01-01T00:00:00Z", **annotations: str) -> dict[str, Any]:
    meta = {"name": f"rs-{created}", "creationTimestamp": created, "annotations": annotations}
    status = {"replicas": replicas, "readyReplicas": available, "availableReplicas": available}
    return {"metadata": meta, "spec": {"replicas": replicas}, "status": status}


@pytest.mark.parametrize(
    ("replicas", "surge", "unavailable", "expected"),
    [
        (2, "25%", "25%", (1, 0)),  # surge rounds up, unavailable down
        (10, "25%", "25%", (3, 2)),
        (4, "50%", "50%", (2, 2)),
        (3, 0, "0%", (0, 1)),  # both zero: one may be unavailable (validation refuses it anyway)
        (5, 2, 1, (2, 1)),
    ],
)
def test_fenceposts_round_as_upstream(replicas, surge, unavailable, expected) -> None:
    assert du.fenceposts(deployment(replicas, surge, unavailable)) == expected


def test_new_replica_set_grows_within_the_surge() -> None:
    d = deployment(4, surge=1)
    old, new = rs(4, 4), rs(0)
    assert du.new_rs_replicas(d, [old, new], new) == 1  # 4 + 1 surge - 4 running
    assert du.new_rs_replicas(d, [rs(3, 3), rs(1)], rs(1)) == 2
    assert du.new_rs_replicas(d, [rs(0), rs(4)], rs(4)) == 4  # never past the replicas
    recreate = {**d, "spec": {**d["spec"], "strategy": {"type": "Recreate"}}}
    assert du.new_rs_replicas(recreate, [old, new], new) == 4
    assert du.max_unavailable(recreate) == du.max_surge(recreate) == 0


def test_proportional_scaling_share_and_rounding() -> None:
    # Scaling 10 -> 15 during a rollout (maxSurge 3 -> 4): an RS sized 6 for max 13 gets round(6 * 19 / 13) - 6 = 3.
    d = deployment(15, surge=4)
    old = rs(6, **{du.MAX_REPLICAS: "13"})
    assert du.proportion(old, d, to_add=6, added=0) == 3
    assert du.proportion(old, d, to_add=6, added=5) == 1  # never more than what is left to add
    assert du.proportion(rs(0), d, to_add=6, added=0) == 0
    assert du.round_half_away(2.5) == 3 and du.round_half_away(-2.5) == -3


def test_proportional_scaling_example_of_the_upstream_docs() -> None:
    """kubernetes.io "Proportional scaling": 10 replicas, maxSurge 3, a stuck rollout with 8 old and 5 new pods,
    scaled to 15: the 5 extra pods go 3 to the old ReplicaSet and 2 to the new one."""
    d = deployment(15, surge=3, unavailable=2)
    old = rs(8, 8, "2026-01-01T00:00:00Z", **{du.MAX_REPLICAS: "13"})
    new = rs(5, 0, "2026-01-01T00:01:00Z", **{du.MAX_REPLICAS: "13"})
    assert [(r["metadata"]["name"], size) for r, size in du.proportional_sizes(d, [new, old])] == [
        (old["metadata"]["name"], 11),
        (new["metadata"]["name"], 7),
    ]
    down = deployment(5, surge=3, unavailable=2)  # back down to 5 (+3 surge): each shrinks by its share
    assert [
        size
        for _, size in du.proportional_sizes(
            down, [rs(11, 0, **{du.MAX_REPLICAS: "18"}), rs(7, 0, "x", **{du.MAX_REPLICAS: "18"})]
        )
    ] == [5, 3]


def test_template_hash_ignores_semantically_empty_fields() -> None:
    template = {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    sent = {
        "metadata": {"labels": {"app": "a"}, "creationTimestamp": None},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {}}]},
    }
    assert du.template_hash(template, None) == du.template_hash(sent, None)
    assert du.template_hash(template, None) != du.template_hash(template, 1)  # a collision count moves the name
    assert set(du.template_hash(template, None)) <= set("bcdfghjklmnpqrstvwxz2456789")
    hashed = {**template, "metadata": {"labels": {"app": "a", du.HASH_LABEL: "x"}}}
    assert du.equal_ignore_hash(hashed, sent)


def test_progress_deadline_on_the_given_clock() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    counts = {"updatedReplicas": 1, "replicas": 3, "readyReplicas": 2, "availableReplicas": 2}
    d = deployment(2, status={**counts, "observedGeneration": 1})
    du.set_condition(d["status"], "Progressing", "True", du.RS_UPDATED, "ReplicaSet is progressing.", now)
    assert not du.timed_out(d, d["status"], now + timedelta(seconds=600))
    assert du.timed_out(d, d["status"], now + timedelta(seconds=601))
    assert progress.stuck_after(d, d["status"], now + timedelta(seconds=100)) == 501
    status = progress.rollout_status(d, [rs(2, 2)], rs(1, 0), now + timedelta(seconds=601))
    cond = du.condition(status, "Progressing")
    assert (cond["status"], cond["reason"]) == ("False", du.TIMED_OUT)


def pod(
    name: str, *, node: str = "n1", phase: str = "Running", ready: bool = True, since: str = "", restarts: int = 0
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "containerStatuses": [{"restartCount": restarts}]}
    status["conditions"] = [{"type": "Ready", "status": str(ready), "lastTransitionTime": since}]
    return {
        "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": node},
        "status": status,
    }


def test_scale_down_deletes_the_least_useful_pods_first() -> None:
    pods = [
        pod("old-ready", since="2026-01-01T00:01:00Z"),
        pod("new-ready", since="2026-01-01T00:05:00Z"),
        pod("not-ready", ready=False),
        pod("pending", phase="Pending", ready=False),
        pod("unscheduled", node="", phase="Pending", ready=False),
        pod("crashy", since="2026-01-01T00:01:00Z", restarts=3),
    ]
    order = [p["metadata"]["name"] for p in deletion_order(pods, pods)]
    assert order == ["unscheduled", "pending", "not-ready", "new-ready", "crashy", "old-ready"]


def test_a_pod_the_api_server_refuses_is_a_replica_failure() -> None:
    """``manageReplicas`` error → the ReplicaSet's ``ReplicaFailure``/``FailedCreate``, copied to its Deployment."""
    store = Store()
    bootstrap(store)
    store.admission[PODS.key] = PodAdmission()  # the ReplicaSet itself is stored without admission
    template = {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "c"}]}}  # no image
    spec = {"replicas": 1, "selector": {"matchLabels": {"app": "a"}}, "template": template}
    store.create(REPLICASETS, "default", {"metadata": {"name": "a-1"}, "spec": spec})
    controller = ReplicaSetController(store, Recorder(store), Clock())
    assert asyncio.run(controller.reconcile(("default", "a-1"))) == 1.0  # retried
    rs_now = store.get(REPLICASETS, "default", "a-1")
    failure = du.condition(rs_now["status"], "ReplicaFailure")
    assert (failure["status"], failure["reason"]) == ("True", "FailedCreate")
    assert "spec.containers[0].image: Required value" in failure["message"]
    d = deployment(1)
    status = progress.rollout_status(d, [], rs_now, datetime(2026, 1, 1, tzinfo=UTC))
    assert du.condition(status, "ReplicaFailure")["reason"] == "FailedCreate"
    assert not store.list(PODS, "default")[0]


def test_a_rollback_sync_moves_the_revision_without_a_conflict() -> None:
    """The ReplicaSet whose template is current again gets the next revision in one sync (isScalingEvent already
    wrote it once: the rollout must not write it again from a stale copy)."""
    store = Store()
    bootstrap(store)
    store.admission[DEPLOYMENTS.key] = DeploymentAdmission()
    template = {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "c", "image": "v1"}]}}
    body = {
        "metadata": {"name": "a"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "a"}}, "template": template},
    }
    d = store.create(DEPLOYMENTS, "default", body)
    owner = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "a", "uid": d["metadata"]["uid"], "controller": True}
    ]
    for name, image, revision in (("a-old", "v1", "1"), ("a-new", "v2", "2")):
        rs_template = copy.deepcopy(d["spec"]["template"])
        rs_template["spec"]["containers"][0]["image"] = image
        meta = {
            "name": name,
            "ownerReferences": owner,
            "labels": {"app": "a"},
            "annotations": {du.REVISION: revision, du.DESIRED_REPLICAS: "1"},
        }
        spec = {
            "replicas": 1 if image == "v2" else 0,
            "selector": {"matchLabels": {"app": "a"}},
            "template": rs_template,
        }
        store.create(REPLICASETS, "default", {"metadata": meta, "spec": spec})
    controller = DeploymentController(store, Recorder(store), Clock())
    asyncio.run(controller.reconcile(("default", "a")))
    assert store.get(REPLICASETS, "default", "a-old")["metadata"]["annotations"][du.REVISION] == "3"
    assert store.get(DEPLOYMENTS, "default", "a")["metadata"]["annotations"][du.REVISION] == "3"
