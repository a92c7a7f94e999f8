"""KubeRay's clean-up of a RayJob's cluster and submitter (ray-project/kuberay v1.7.0
``ray-operator/controllers/ray/rayjob_controller.go``): ``deleteClusterResources`` and ``deleteSubmitterJob`` (a
suspended or retried RayJob, ``shutdownAfterJobFinishes``), and the ``deletionStrategy`` rules
(``handleDeletionRules``, ``isDeletionActionCompleted``, ``executeDeletionPolicy``). A mixin of
:class:`~.rayjob.RayJobController`, which gives it the store and its events.
"""

from __future__ import annotations

import contextlib
import copy
from datetime import UTC, datetime, timedelta

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.controllers.rayjobspec import submission_mode
from airflow_elastic.localcluster.resources import JOBS, RAYCLUSTERS, RAYJOBS, Resource
from airflow_elastic.localcluster.store import Obj, Store

REQUEUE_SECONDS = 3.0  # RayJobDefaultRequeueDuration
#: ``executeDeletionPolicy``'s order when several rules are overdue: the most destructive first.
POLICY_ORDER = {"DeleteSelf": 4, "DeleteCluster": 3, "DeleteWorkers": 2, "DeleteNone": 1}
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def parse_time(stamp: str) -> datetime:
    return datetime.strptime(stamp, TIME_FORMAT).replace(tzinfo=UTC)


class RayJobCleanup:
    """Deleting what a RayJob made, as its status and ``deletionStrategy`` say."""

    store: Store

    def _event(self, rayjob: Obj, kind: str, why: str, message: str) -> None:
        raise NotImplementedError  # the controller records it

    def _delete_cluster(self, rayjob: Obj, status: Obj) -> bool:
        """``deleteClusterResources``: True once the RayCluster is gone."""
        if rayjob["spec"].get("clusterSelector"):
            return True
        ns, name = rayjob["metadata"]["namespace"], status.get("rayClusterName", "")
        return self._delete(rayjob, RAYCLUSTERS, name, ("DeletedRayCluster", f"Deleted cluster {ns}/{name}"))

    def _delete(
        self, rayjob: Obj, res: Resource, name: str, event: tuple[str, str], propagation: str | None = None
    ) -> bool:
        """Delete ``name`` once (``event``: reason and message); True once it is gone."""
        ns = rayjob["metadata"]["namespace"]
        found = self.store.find(res, ns, name) if name else None
        if found is None:
            return True
        if not found["metadata"].get("deletionTimestamp"):
            with contextlib.suppress(errors.NotFound):
                self.store.delete(res, ns, name, propagation=propagation)
            self._event(rayjob, "Normal", *event)
        return False

    def _delete_submitter(self, rayjob: Obj) -> bool:
        """``deleteSubmitterJob``: True once the submitter Job is gone (none in ``HTTPMode``)."""
        if submission_mode(rayjob) == "HTTPMode":
            return True
        ns, name = rayjob["metadata"]["namespace"], rayjob["metadata"]["name"]
        event = ("DeletedRayJobSubmitter", f"Deleted submitter K8s Job {ns}/{name}")
        return self._delete(rayjob, JOBS, name, event, "Background")

    def _left(self, status: Obj, ttl: int) -> float | None:
        """Seconds until ``endTime + ttl`` plus upstream's 2 s buffer (``requeueDelayFor``), or None once due."""
        end = status.get("endTime")
        if not end:
            return None
        due = parse_time(end) + timedelta(seconds=ttl)
        left = (due - datetime.now(UTC)).total_seconds()
        return left + 2 if left > 0 else None

    def _deletion_rules(self, rayjob: Obj, status: Obj, rules: list[Obj]) -> float | None:
        """``handleDeletionRules``: the most destructive overdue rule not yet done, then the next pending one."""
        overdue, pending = [], []
        for rule in rules:
            cond = rule.get("condition") or {}
            if "jobStatus" in cond:
                matched = cond["jobStatus"] == status.get("jobStatus", "")
            else:
                matched = cond.get("jobDeploymentStatus") == status.get("jobDeploymentStatus")
            if not matched:
                continue
            left = self._left(status, int(cond.get("ttlSeconds") or 0))
            if left is not None:
                pending.append(left)
            elif not self._done(rayjob, status, rule["policy"]):
                overdue.append(rule)
        if overdue:
            self._execute(rayjob, status, max(overdue, key=lambda r: POLICY_ORDER.get(r["policy"], 0))["policy"])
        return min(pending) if pending else None

    def _done(self, rayjob: Obj, status: Obj, policy: str) -> bool:
        """``isDeletionActionCompleted``."""
        cluster = self.store.find(RAYCLUSTERS, rayjob["metadata"]["namespace"], status.get("rayClusterName", ""))
        gone = cluster is None or bool(cluster["metadata"].get("deletionTimestamp"))
        if policy == "DeleteWorkers":
            return gone or all(g.get("suspend") for g in (cluster or {}).get("spec", {}).get("workerGroupSpecs") or [])
        return {"DeleteCluster": gone, "DeleteSelf": False}.get(policy, True)

    def _execute(self, rayjob: Obj, status: Obj, policy: str) -> float | None:
        """``executeDeletionPolicy``."""
        ns = rayjob["metadata"]["namespace"]
        if policy == "DeleteCluster":
            self._delete_cluster(rayjob, status)
        elif policy == "DeleteWorkers":
            name = status.get("rayClusterName", "")
            cluster = copy.deepcopy(self.store.find(RAYCLUSTERS, ns, name))
            if cluster is None:
                return REQUEUE_SECONDS
            for group in cluster["spec"].get("workerGroupSpecs") or []:
                group["suspend"] = True
            self.store.update(RAYCLUSTERS, cluster)
            message = f"Set the `suspend` field to true for all worker groups in cluster {ns}/{name}"
            self._event(rayjob, "Normal", "UpdatedRayCluster", message)
        elif policy == "DeleteSelf":
            with contextlib.suppress(errors.NotFound):
                self.store.delete(RAYJOBS, ns, rayjob["metadata"]["name"])
        return None
