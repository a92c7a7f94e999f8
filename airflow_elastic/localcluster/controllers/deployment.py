"""The apps/v1 Deployment controller: ReplicaSets per pod template, rolled out RollingUpdate or Recreate.

Follows kubernetes ``pkg/controller/deployment``: ``syncDeployment`` (``deployment_controller.go``) claims
ReplicaSets, then a paused Deployment or a scaling event goes to ``sync`` (proportional ``scale``,
``sync.go``), otherwise ``rolloutRolling`` (``rolling.go``: ``reconcileNewReplicaSet``,
``reconcileOldReplicaSets``, ``cleanupUnhealthyReplicas``, ``scaleDownOldReplicaSetsForRollingUpdate``) or
``rolloutRecreate`` (``recreate.go``). ``getNewReplicaSet`` reuses a ReplicaSet whose template matches (a
rollback) and moves the ``deployment.kubernetes.io/revision`` annotation; ``syncRolloutStatus``
(``progress.go``) sets ``Progressing``/``Available``/``ReplicaFailure`` and re-checks a stuck rollout when its
progress deadline passes. Time is the controller clock (:mod:`..clock`), so tests can move past the deadline.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, overload

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.clock import Clock
from airflow_elastic.localcluster.controller import Controller, Key, own_key, owner_key
from airflow_elastic.localcluster.controllers import deploymentprogress as progress
from airflow_elastic.localcluster.controllers import deploymentutil as du
from airflow_elastic.localcluster.controllers.replicaset import owner_ref
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.resources import DEPLOYMENTS, PODS, REPLICASETS
from airflow_elastic.localcluster.selectors import match_label_selector
from airflow_elastic.localcluster.store import Obj, Store, controller_uid

COMPONENT = "deployment-controller"
MAX_REVISION_HISTORY_CHARS = 2000


class DeploymentController(Controller):
    """Reconciles apps/v1 Deployments; keys are (namespace, deployment name)."""

    name = COMPONENT

    def __init__(self, store: Store, recorder: Recorder, clock: Clock):
        super().__init__(store)
        self.recorder, self.clock = recorder, clock
        self.watches = {DEPLOYMENTS.key: own_key, REPLICASETS.key: self._rs_keys, PODS.key: self._pod_keys}
        clock.on_change(self._clock_moved)

    def _clock_moved(self) -> None:
        for d in list(self.store.items(DEPLOYMENTS)):
            self.enqueue(own_key(d)[0])

    def _rs_keys(self, rs: Obj) -> list[Key]:
        """The owning Deployment, or those that could adopt an orphaned ReplicaSet (``addReplicaSet``)."""
        if controller_uid(rs):
            return owner_key("Deployment")(rs)
        ns, labels = rs["metadata"].get("namespace", ""), rs["metadata"].get("labels") or {}
        return [
            (ns, d["metadata"]["name"])
            for d in self.store.items(DEPLOYMENTS, ns)
            if match_label_selector(d["spec"].get("selector"), labels)
        ]

    def _pod_keys(self, pod: Obj) -> list[Key]:
        """``deletePod``: Recreate waits for old pods to go; only those pods' Deployments are looked at."""
        ns = pod["metadata"].get("namespace", "")
        keys: list[Key] = []
        for rs_key in owner_key("ReplicaSet")(pod):
            rs = self.store.find(REPLICASETS, *rs_key)
            if rs is not None:
                keys += owner_key("Deployment")(rs)
        return [k for k in keys if k[0] == ns and _recreate(self.store.find(DEPLOYMENTS, *k))]

    def _event(self, d: Obj, kind: str, reason: str, message: str) -> None:
        self.recorder.record(d, kind, reason, message, COMPONENT)

    # ------------------------------------------------------------------------------------------ reconcile

    async def reconcile(self, key: Key) -> float | None:
        current = self.store.find(DEPLOYMENTS, *key)
        if current is None:
            return None
        d = copy.deepcopy(current)
        rss = self._claim(d)
        if d["metadata"].get("deletionTimestamp"):
            new_rs, old_rss = self._new_and_old(d, rss, create=False)
            return self._sync_status(d, old_rss, new_rs)
        d = self._check_paused(d)
        if d["spec"].get("paused") or self._scaling_event(d, rss):
            return self._sync(d, rss)
        if _recreate(d):
            return self._rollout_recreate(d, rss)
        return self._rollout_rolling(d, rss)

    def _claim(self, d: Obj) -> list[Obj]:
        """``getReplicaSetsForDeployment``: owned ReplicaSets still matching, plus adopted orphans."""
        meta, selector = d["metadata"], d["spec"].get("selector")
        claimed = []
        for rs in list(self.store.items(REPLICASETS, meta["namespace"])):
            owner, matches = controller_uid(rs), match_label_selector(selector, rs["metadata"].get("labels") or {})
            if owner == meta["uid"] and matches:
                claimed.append(copy.deepcopy(rs))
            elif owner == meta["uid"] or (not owner and matches and not meta.get("deletionTimestamp")):
                updated = copy.deepcopy(rs)
                refs = [r for r in updated["metadata"].get("ownerReferences") or [] if not r.get("controller")]
                updated["metadata"]["ownerReferences"] = refs + ([owner_ref(d)] if matches else [])
                with contextlib.suppress(errors.ApiError):
                    written = self.store.update(REPLICASETS, updated)
                    if matches:
                        claimed.append(written)
        return claimed

    def _check_paused(self, d: Obj) -> Obj:
        """``checkPausedConditions``: Progressing Unknown ``DeploymentPaused``/``DeploymentResumed``."""
        if du.deadline(d) is None:
            return d
        status = copy.deepcopy(d.get("status") or {})
        cond = du.condition(status, "Progressing")
        if cond is not None and cond.get("reason") == du.TIMED_OUT:
            return d
        paused_cond = cond is not None and cond.get("reason") == du.PAUSED
        if d["spec"].get("paused") and not paused_cond:
            du.set_condition(status, "Progressing", "Unknown", du.PAUSED, "Deployment is paused", self.clock.now())
        elif not d["spec"].get("paused") and paused_cond:
            du.set_condition(status, "Progressing", "Unknown", du.RESUMED, "Deployment is resumed", self.clock.now())
        else:
            return d
        return self._write_status(d, status)

    def _scaling_event(self, d: Obj, rss: list[Obj]) -> bool:
        """``isScalingEvent``: an active ReplicaSet was sized for another replica count."""
        new_rs, old_rss = self._new_and_old(d, rss, create=False)
        for rs in du.active(old_rss + ([new_rs] if new_rs else [])):
            desired = (rs["metadata"].get("annotations") or {}).get(du.DESIRED_REPLICAS, "")
            if desired.isdigit() and int(desired) != du.replicas(d):
                return True
        return False

    # ------------------------------------------------------------------------------------- replica sets

    def _new_and_old(self, d: Obj, rss: list[Obj], create: bool) -> tuple[Obj | None, list[Obj]]:
        """``getAllReplicaSetsAndSyncRevision`` (on the ReplicaSets as stored now: an earlier step of this sync may
        have written one)."""
        rss = [_refresh(self.store, rs) for rs in rss]
        existing = du.find_new(d, rss)
        old = [rs for rs in rss if existing is None or rs["metadata"]["uid"] != existing["metadata"]["uid"]]
        new = self._new_rs(d, existing, old, create)
        return new, old

    def _new_rs(self, d: Obj, existing: Obj | None, old: list[Obj], create: bool) -> Obj | None:
        """``getNewReplicaSet``: bring the matching ReplicaSet's annotations up to date, or create it."""
        new_revision = str(max((du.revision(rs) for rs in old), default=0) + 1)
        if existing is not None:
            rs = copy.deepcopy(existing)
            changed = _set_rs_annotations(d, rs, new_revision, exists=True)
            if changed or rs["spec"].get("minReadySeconds", 0) != d["spec"].get("minReadySeconds", 0):
                rs["spec"]["minReadySeconds"] = d["spec"].get("minReadySeconds", 0)
                return self.store.update(REPLICASETS, rs)
            revision = (rs["metadata"].get("annotations") or {}).get(du.REVISION, "")
            self._set_revision(d, revision)
            status = copy.deepcopy(d.get("status") or {})
            if du.deadline(d) is not None and du.condition(status, "Progressing") is None:
                message = f'Found new replica set "{rs["metadata"]["name"]}"'
                du.set_condition(status, "Progressing", "True", du.FOUND_NEW_RS, message, self.clock.now())
                d.update(self._write_status(d, status))
            return rs
        if not create:
            return None
        return self._create_rs(d, old, new_revision)

    def _create_rs(self, d: Obj, old: list[Obj], new_revision: str) -> Obj | None:
        status = copy.deepcopy(d.get("status") or {})
        template = copy.deepcopy(d["spec"]["template"])
        pod_hash = du.template_hash(template, status.get("collisionCount"))
        template.setdefault("metadata", {})["labels"] = {
            **(template["metadata"].get("labels") or {}),
            du.HASH_LABEL: pod_hash,
        }
        selector = copy.deepcopy(d["spec"]["selector"])
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), du.HASH_LABEL: pod_hash}
        name = f"{d['metadata']['name']}-{pod_hash}"
        rs: Obj = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": d["metadata"]["namespace"],
                "labels": template["metadata"]["labels"],
                "ownerReferences": [owner_ref(d)],
            },
            "spec": {
                "replicas": 0,
                "minReadySeconds": d["spec"].get("minReadySeconds", 0),
                "selector": selector,
                "template": template,
            },
        }
        rs["spec"]["replicas"] = du.new_rs_replicas(d, [*old, rs], rs)
        _set_rs_annotations(d, rs, new_revision, exists=False)
        try:
            created = self.store.create(REPLICASETS, d["metadata"]["namespace"], rs)
        except errors.AlreadyExists:
            found = self.store.find(REPLICASETS, d["metadata"]["namespace"], name)
            if (
                found
                and controller_uid(found) == d["metadata"]["uid"]
                and du.equal_ignore_hash(found["spec"]["template"], d["spec"]["template"])
            ):
                return copy.deepcopy(found)
            status["collisionCount"] = status.get("collisionCount", 0) + 1  # a hash collision: try another name
            self._write_status(d, status)
            return None
        except errors.ApiError as err:
            message = f'Failed to create new replica set "{name}": {err.message}'
            if du.deadline(d) is not None:
                du.set_condition(status, "Progressing", "False", "ReplicaSetCreateError", message, self.clock.now())
                self._write_status(d, status)
            self._event(d, "Warning", "ReplicaSetCreateError", message)
            return None
        if du.replicas(created) > 0:
            self._event(
                d, "Normal", "ScalingReplicaSet", f"Scaled up replica set {name} from 0 to {du.replicas(created)}"
            )
        self._set_revision(d, new_revision)
        if du.deadline(d) is not None:
            message = f'Created new replica set "{name}"'
            du.set_condition(status, "Progressing", "True", du.NEW_RS_CREATED, message, self.clock.now())
            d.update(self._write_status(d, status))
        return created

    def _set_revision(self, d: Obj, revision: str) -> None:
        """``SetDeploymentRevision`` (written through the main resource: our status writes keep metadata)."""
        annotations = d["metadata"].get("annotations") or {}
        if not revision or annotations.get(du.REVISION) == revision:
            return
        current = copy.deepcopy(self.store.find(DEPLOYMENTS, d["metadata"]["namespace"], d["metadata"]["name"]))
        if current is None:
            return
        current["metadata"].setdefault("annotations", {})[du.REVISION] = revision
        d["metadata"] = self.store.update(DEPLOYMENTS, current)["metadata"]

    def _scale_rs(self, d: Obj, rs: Obj, size: int) -> tuple[bool, Obj]:
        """``scaleReplicaSetAndRecordEvent``: resize and refresh the replicas annotations."""
        want, ceiling = str(du.replicas(d)), str(du.replicas(d) + du.max_surge(d))
        annotations = rs["metadata"].get("annotations") or {}
        resize = du.replicas(rs) != size
        if not resize and annotations.get(du.DESIRED_REPLICAS) == want and annotations.get(du.MAX_REPLICAS) == ceiling:
            return False, rs
        updated = copy.deepcopy(rs)
        updated["spec"]["replicas"] = size
        updated["metadata"]["annotations"] = {**annotations, du.DESIRED_REPLICAS: want, du.MAX_REPLICAS: ceiling}
        written = self.store.update(REPLICASETS, updated)
        if resize:
            op = "up" if du.replicas(rs) < size else "down"
            old_size, name = du.replicas(rs), rs["metadata"]["name"]
            self._event(d, "Normal", "ScalingReplicaSet", f"Scaled {op} replica set {name} from {old_size} to {size}")
        return resize, written

    # --------------------------------------------------------------------------------------------- sync

    def _sync(self, d: Obj, rss: list[Obj]) -> float | None:
        """``sync``: a paused Deployment or a scaling event: resize proportionally, no rollout."""
        new_rs, old_rss = self._new_and_old(d, rss, create=False)
        old_rss = self._scale(d, new_rs, old_rss)
        new_rs = _refresh(self.store, new_rs)
        if d["spec"].get("paused"):
            self._cleanup(d, old_rss)
        return self._sync_status(d, old_rss, new_rs)

    def _scale(self, d: Obj, new_rs: Obj | None, old_rss: list[Obj]) -> list[Obj]:
        """``scale``; returns the old ReplicaSets as written."""
        latest = du.active_or_latest(new_rs, old_rss)
        if latest is not None:
            if du.replicas(latest) != du.replicas(d):
                self._scale_rs(d, latest, du.replicas(d))
            return [_refresh(self.store, rs) for rs in old_rss]
        if du.saturated(d, new_rs):
            for rs in du.active(old_rss):
                self._scale_rs(d, rs, 0)
            return [_refresh(self.store, rs) for rs in old_rss]
        if du.rolling(d):
            for rs, size in du.proportional_sizes(d, du.active(old_rss + ([new_rs] if new_rs else []))):
                self._scale_rs(d, rs, size)
        return [_refresh(self.store, rs) for rs in old_rss]

    def _cleanup(self, d: Obj, old_rss: list[Obj]) -> None:
        """``cleanupDeployment``: delete the oldest empty ReplicaSets beyond ``revisionHistoryLimit``."""
        limit = d["spec"].get("revisionHistoryLimit")
        if limit is None:
            return
        alive = sorted(
            (rs for rs in old_rss if not rs["metadata"].get("deletionTimestamp")),
            key=lambda rs: (du.revision(rs), rs["metadata"].get("creationTimestamp", "")),
        )
        for rs in alive[: max(len(alive) - int(limit), 0)]:
            status = rs.get("status") or {}
            if (
                status.get("replicas", 0)
                or du.replicas(rs)
                or rs["metadata"].get("generation", 1) > status.get("observedGeneration", 0)
            ):
                continue
            with contextlib.suppress(errors.NotFound):
                self.store.delete(REPLICASETS, rs["metadata"]["namespace"], rs["metadata"]["name"])

    # ------------------------------------------------------------------------------------------ rollouts

    def _rollout_rolling(self, d: Obj, rss: list[Obj]) -> float | None:
        """``rolloutRolling``: scale the new ReplicaSet up if possible, else the old ones down if possible."""
        new_rs, old_rss = self._new_and_old(d, rss, create=True)
        if new_rs is None:
            return 1.0  # creation failed or collided: retry
        all_rss = [*old_rss, new_rs]
        if du.replicas(new_rs) != du.replicas(d):
            size = du.replicas(d) if du.replicas(new_rs) > du.replicas(d) else du.new_rs_replicas(d, all_rss, new_rs)
            scaled, new_rs = self._scale_rs(d, new_rs, size)
            if scaled:
                return self._sync_status(d, old_rss, new_rs)
        if self._reconcile_old(d, old_rss, new_rs):
            return self._sync_status(d, [_refresh(self.store, rs) for rs in old_rss], new_rs)
        if du.complete(d, d.get("status") or {}):
            self._cleanup(d, old_rss)
        return self._sync_status(d, old_rss, new_rs)

    def _reconcile_old(self, d: Obj, old_rss: list[Obj], new_rs: Obj) -> bool:
        """``reconcileOldReplicaSets``: never below ``replicas - maxUnavailable`` available pods."""
        old = du.active(old_rss)
        if du.total_spec(old) == 0:
            return False
        min_available = du.replicas(d) - du.max_unavailable(d)
        new_unavailable = du.replicas(new_rs) - du.status_of(new_rs, "availableReplicas")
        budget = du.total_spec([*old, new_rs]) - min_available - new_unavailable
        if budget <= 0:
            return False
        scaled = 0
        for rs in du.by_creation(old):  # cleanupUnhealthyReplicas: unavailable pods go first
            unhealthy = du.replicas(rs) - du.status_of(rs, "availableReplicas")
            if scaled >= budget or du.replicas(rs) == 0 or unhealthy <= 0:
                continue
            count = min(budget - scaled, unhealthy)
            self._scale_rs(d, rs, du.replicas(rs) - count)
            scaled += count
        old = [_refresh(self.store, rs) for rs in old]
        available = du.counted_available([*old, new_rs])  # scaleDownOldReplicaSetsForRollingUpdate
        if available > min_available:
            to_remove, removed = available - min_available, 0
            for rs in du.by_creation(old):
                if removed >= to_remove:
                    break
                if du.replicas(rs) == 0:
                    continue
                count = min(du.replicas(rs), to_remove - removed)
                self._scale_rs(d, rs, du.replicas(rs) - count)
                removed += count
            scaled += removed
        return scaled > 0

    def _rollout_recreate(self, d: Obj, rss: list[Obj]) -> float | None:
        """``rolloutRecreate``: all old pods gone before the new ReplicaSet scales up."""
        new_rs, old_rss = self._new_and_old(d, rss, create=False)
        scaled = False
        for rs in du.active(old_rss):
            scaled |= self._scale_rs(d, rs, 0)[0]
        if scaled or self._old_pods_running(new_rs, old_rss):
            return self._sync_status(d, [_refresh(self.store, rs) for rs in old_rss], new_rs)
        if new_rs is None:
            new_rs, old_rss = self._new_and_old(d, rss, create=True)
            if new_rs is None:
                return 1.0
        if du.replicas(new_rs) != du.replicas(d):
            new_rs = self._scale_rs(d, new_rs, du.replicas(d))[1]
        if du.complete(d, d.get("status") or {}):
            self._cleanup(d, old_rss)
        return self._sync_status(d, old_rss, new_rs)

    def _old_pods_running(self, new_rs: Obj | None, old_rss: list[Obj]) -> bool:
        """``oldPodsRunning``: an old ReplicaSet reports pods, or still has a pod that is not terminal."""
        if du.total_status(old_rss, "replicas") > 0:
            return True
        return any(
            (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            for rs in old_rss
            for pod in self.store.owned(PODS, rs["metadata"]["namespace"], rs["metadata"]["uid"])
        )

    # ------------------------------------------------------------------------------------------- status

    def _sync_status(self, d: Obj, old_rss: list[Obj], new_rs: Obj | None) -> float | None:
        """``syncRolloutStatus``: write a changed status, else return when a stuck rollout is due a look."""
        status = progress.rollout_status(d, old_rss, new_rs, self.clock.now())
        if status != (d.get("status") or {}):
            self._write_status(d, status)
            return None
        return progress.stuck_after(d, status, self.clock.now())

    def _write_status(self, d: Obj, status: dict[str, Any]) -> Obj:
        meta = d["metadata"]
        body = {"metadata": {"name": meta["name"], "namespace": meta["namespace"]}, "status": status}
        try:
            return self.store.update(DEPLOYMENTS, body, subresource="status")
        except errors.NotFound:
            return d


def _recreate(d: Obj | None) -> bool:
    return d is not None and (d["spec"].get("strategy") or {}).get("type") == "Recreate"


@overload
def _refresh(store: Store, rs: Obj) -> Obj: ...


@overload
def _refresh(store: Store, rs: None) -> None: ...


def _refresh(store: Store, rs: Obj | None) -> Obj | None:
    if rs is None:
        return None
    found = store.find(REPLICASETS, rs["metadata"]["namespace"], rs["metadata"]["name"])
    return copy.deepcopy(found) if found is not None else rs


def _set_rs_annotations(d: Obj, rs: Obj, new_revision: str, exists: bool) -> bool:
    """``SetNewReplicaSetAnnotations``: copy the Deployment's annotations, raise the revision (keeping the old
    ones in ``revision-history`` on a rollback), and size annotations on a new ReplicaSet."""
    annotations = rs["metadata"].setdefault("annotations", {})
    changed = False
    for key, value in (d["metadata"].get("annotations") or {}).items():
        if key not in du.SKIPPED and annotations.get(key) != value:
            annotations[key], changed = value, True
    old = annotations.get(du.REVISION, "")
    if old and not old.isdigit():
        return changed
    if int(old or 0) < int(new_revision):
        annotations[du.REVISION], changed = new_revision, True
        if old:
            history = [h for h in annotations.get(du.REVISION_HISTORY, "").split(",") if h] + [old]
            while len(",".join(history)) > MAX_REVISION_HISTORY_CHARS:
                history.pop(0)
            annotations[du.REVISION_HISTORY] = ",".join(history)
    if not exists:
        annotations[du.DESIRED_REPLICAS] = str(du.replicas(d))
        annotations[du.MAX_REPLICAS] = str(du.replicas(d) + du.max_surge(d))
        changed = True
    return changed
