"""The horizontal pod autoscaler controller (autoscaling/v2), after kubernetes
``pkg/controller/podautoscaler/horizontal.go`` (``reconcileAutoscaler``, ``computeReplicasForMetrics``, ``setStatus``).

Every ``sync_seconds`` (``--horizontal-pod-autoscaler-sync-period``, 15 s) each HPA reads its target's ``scale``
subresource, computes a size from its Resource metrics (``metrics.k8s.io`` samples of the kubelet, through
:mod:`.replicacalc`), normalises it (min/max, ``behavior`` rates, stabilization windows on the controller clock) and
writes it back through ``scale``, with the ``SuccessfulRescale`` event and the status conditions ``AbleToScale``,
``ScalingActive`` and ``ScalingLimited``. Resource and ContainerResource metrics are served; Pods, Object and
External metrics need a custom or external metrics API,
which the local cluster does not serve: such a metric fails as it would without an adapter installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from datetime import datetime, timedelta

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.clock import Clock, format_time, parse_time
from airflow_elastic.localcluster.controller import Controller, Key, own_key
from airflow_elastic.localcluster.controllers import replicacalc as calc
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.kubelet.stats import Scraper
from airflow_elastic.localcluster.quantity import decimal_quantity, quantity
from airflow_elastic.localcluster.resources import HORIZONTALPODAUTOSCALERS as HPAS
from airflow_elastic.localcluster.resources import PODS, by_kind
from airflow_elastic.localcluster.scaleview import scale_of, set_path
from airflow_elastic.localcluster.selectors import parse_label_selector
from airflow_elastic.localcluster.store import Obj, Store

COMPONENT = "horizontal-pod-autoscaler"
GOT_SCALE = "the HPA controller was able to get the target's current scale"
NO_SCALE = "the HPA controller was unable to get the target's current scale: "
DISABLED = "scaling is disabled since the replica count of the target is zero"
NO_COUNT = "the HPA was unable to compute the replica count: "
VALID = "the HPA was able to successfully calculate a replica count from "
NO_UPDATE = "the HPA controller was unable to update the target scale: "
UPDATED = "the HPA controller was able to update the target scale to "
NO_CUSTOM = "the local cluster serves no custom or external metrics API"


def milli_quantity(milli: int) -> str:
    """``resource.NewMilliQuantity(v, DecimalSI).String()`` (``250m``, ``1``, ``52428800``, ``5M``)."""
    return decimal_quantity(milli, "m")


def _time(stamp: str | None) -> datetime | None:
    return parse_time(stamp) if stamp else None


class HorizontalPodAutoscalerController(Controller):
    name = "horizontal-pod-autoscaler"

    def __init__(
        self, store: Store, recorder: Recorder, clock: Clock, scraper: Scraper, sync_seconds: float = 15.0
    ) -> None:
        super().__init__(store)
        self.recorder, self.clock, self.scraper, self.sync_seconds = recorder, clock, scraper, sync_seconds
        self.watches = {HPAS.key: own_key}
        self._memory: dict[Key, tuple[str, calc.Recommender]] = {}
        self._generation: dict[Key, int] = {}
        self._timers: dict[Key, asyncio.TimerHandle] = {}

    # ------------------------------------------------------------------------------------------ scheduling

    def _schedule(self, key: Key) -> None:
        """Next sync in ``sync_seconds`` (its own status writes do not resync an HPA sooner, as upstream's
        rate-limited queue)."""
        if (timer := self._timers.pop(key, None)) is not None:
            timer.cancel()
        self._timers[key] = asyncio.get_running_loop().call_later(self.sync_seconds, self._due, key)

    def _due(self, key: Key) -> None:
        self._timers.pop(key, None)
        self._generation.pop(key, None)
        self.enqueue(key)

    async def reconcile(self, key: Key) -> float | None:
        hpa = self.store.find(HPAS, *key)
        if hpa is None:
            self._memory.pop(key, None)
            self._generation.pop(key, None)
            if (timer := self._timers.pop(key, None)) is not None:
                timer.cancel()
            return None
        generation = hpa["metadata"].get("generation", 1)
        if self._generation.get(key) == generation and key in self._timers:
            return None  # a status write, or a change of nothing we read: wait for the sync period
        self._generation[key] = generation
        self._schedule(key)
        uid = hpa["metadata"]["uid"]
        if key not in self._memory or self._memory[key][0] != uid:
            self._memory[key] = (uid, calc.Recommender())
        self.sync(hpa, self._memory[key][1])
        return None

    # ------------------------------------------------------------------------------------------ one sync

    def sync(self, hpa: Obj, memory: calc.Recommender) -> None:
        """``reconcileAutoscaler``."""
        now = self.clock.now()
        status = copy.deepcopy(hpa.get("status") or {})
        conditions: list[Obj] = list(status.get("conditions") or [])
        spec, ns = hpa.get("spec") or {}, hpa["metadata"]["namespace"]

        def condition(kind: str, value: bool, reason: str, message: str) -> None:
            setcondition(conditions, kind, value, reason, message, format_time(now))

        ref = spec.get("scaleTargetRef") or {}
        res = by_kind(ref.get("apiVersion", ""), ref.get("kind", ""))
        scale_paths = res.scale if res is not None else None
        target_obj = self.store.find(res, ns, ref.get("name", "")) if res is not None and scale_paths else None
        if res is None or scale_paths is None or target_obj is None:
            what = f"{res.plural}.{res.group}" if res is not None else f"{ref.get('kind')} ({ref.get('apiVersion')})"
            message = f'{what} "{ref.get("name")}" not found' if res is not None else f"no scale for {what}"
            condition("AbleToScale", False, "FailedGetScale", NO_SCALE + message)
            self.recorder.record(hpa, "Warning", "FailedGetScale", message, COMPONENT)
            self._write(hpa, {**status, "conditions": conditions})
            return
        scale = scale_of(res, target_obj)
        current = int(scale["spec"]["replicas"])
        condition("AbleToScale", True, "SucceededGetScale", GOT_SCALE)
        low, high = int(spec.get("minReplicas") or 1), int(spec["maxReplicas"])
        behavior = spec.get("behavior")
        metric_statuses: list[Obj] = list(status.get("currentMetrics") or [])
        desired, reason, rescale = 0, "", True
        if current == 0 and low != 0:
            rescale = False
            condition("ScalingActive", False, "ScalingDisabled", DISABLED)
        elif current > high:
            desired, reason = high, "Current number of replicas above Spec.MaxReplicas"
        elif current < low:
            desired, reason = low, "Current number of replicas below Spec.MinReplicas"
        else:
            proposal, metric_name, metric_statuses, failures = self._compute(hpa, scale, current, now)
            for kind, message in failures:  # each failing metric, even when another one gives a size
                condition("ScalingActive", False, kind, NO_COUNT + message)
                self.recorder.record(hpa, "Warning", kind, message, COMPONENT)
            if proposal < 0:
                status.update(currentReplicas=current, currentMetrics=metric_statuses or None, conditions=conditions)
                self._write(hpa, {k: v for k, v in {**status, "conditions": conditions}.items() if v is not None})
                return
            condition("ScalingActive", True, "ValidMetricFound", VALID + metric_name)
            desired = proposal
            if desired > current:
                reason = f"{metric_name} above target"
            elif desired < current:
                reason = "All metrics below target"
            decision = memory.normalize(behavior, current, desired, low, high, now)
            condition("AbleToScale", True, *decision.able)
            condition("ScalingLimited", *decision.limited)
            desired = decision.replicas
            rescale = desired != current
        if rescale:
            updated = copy.deepcopy(target_obj)
            set_path(updated, scale_paths[0], desired)
            try:
                self.store.update(res, updated, namespace=ns)
            except errors.ApiError as err:
                message = f"New size: {desired}; reason: {reason}; error: {err}"
                self.recorder.record(hpa, "Warning", "FailedRescale", message, COMPONENT)
                condition("AbleToScale", False, "FailedUpdateScale", f"{NO_UPDATE}{err}")
                self._write(hpa, {**status, "conditions": conditions})
                return
            condition("AbleToScale", True, "SucceededRescale", f"{UPDATED}{desired}")
            self.recorder.record(
                hpa, "Normal", "SuccessfulRescale", f"New size: {desired}; reason: {reason}", COMPONENT
            )
            memory.scaled(behavior, current, desired, now)
            status["lastScaleTime"] = format_time(now)
        else:
            desired = current
        status.update(
            observedGeneration=hpa["metadata"].get("generation", 1),
            currentReplicas=current,
            desiredReplicas=desired,
            currentMetrics=metric_statuses,
            conditions=conditions,
        )
        if not metric_statuses:
            status.pop("currentMetrics")
        self._write(hpa, status)

    def _compute(
        self, hpa: Obj, scale: Obj, current: int, now: datetime
    ) -> tuple[int, str, list[Obj], list[tuple[str, str]]]:
        """``computeReplicasForMetrics``: the largest proposal, its metric, statuses, and failures (-1: none)."""
        best, best_name, statuses, failures = -1, "", [], []
        for metric in (hpa.get("spec") or {}).get("metrics") or []:
            kind = metric.get("type", "")
            key = kind[:1].lower() + kind[1:]  # resource, containerResource, pods, object, external
            source = metric.get(key) or {}
            if kind not in ("Resource", "ContainerResource"):
                name = (source.get("metric") or {}).get("name", kind)
                failures.append((f"FailedGet{kind}Metric", f"unable to get metric {name}: {NO_CUSTOM}"))
                continue
            try:
                replicas, reading = self._resource(source, hpa, scale, current, now)
            except calc.MetricsError as err:
                failures.append((f"FailedGet{kind}Metric", f"failed to get {source['name']} utilization: {err}"))
                continue
            statuses.append(
                {
                    "type": kind,
                    key: {**{k: source[k] for k in ("name", "container") if k in source}, "current": reading},
                }
            )
            if replicas > best:
                utilization = source["target"]["type"] == "Utilization"
                detail = " utilization (percentage of request)" if utilization else ""
                of = f" of container {source['container']}" if "container" in source else ""
                best, best_name = replicas, f"{source['name']}{of} resource{detail}"
        if best < 0 and not failures:
            failures.append(("FailedGetResourceMetric", "no metrics to compute a replica count from"))
        return best, best_name, statuses, failures

    def _resource(self, source: Obj, hpa: Obj, scale: Obj, current: int, now: datetime) -> tuple[int, Obj]:
        """``computeStatusForResourceMetric`` (``...ContainerResourceMetric`` when ``source`` names a container):
        replicas and the ``current`` reading."""
        resource, target = source["name"], source.get("target") or {}
        selector = (scale.get("status") or {}).get("selector")
        if not selector:
            raise calc.MetricsError("selector is required")
        matches = parse_label_selector(selector)
        pods = [
            self._sample(pod, resource, source.get("container"))
            for pod in self.store.items(PODS, hpa["metadata"]["namespace"])
            if matches(pod["metadata"].get("labels") or {})
        ]
        if target.get("type") == "Utilization":
            outcome = calc.resource_replicas(
                current, pods, cpu=resource == "cpu", now=now, target_utilization=int(target["averageUtilization"])
            )
            reading = {"averageUtilization": outcome.utilization, "averageValue": milli_quantity(outcome.raw)}
            return outcome.replicas, reading
        if target.get("type") == "AverageValue":
            wanted = int(quantity(target["averageValue"]) * 1000)
            outcome = calc.resource_replicas(current, pods, cpu=resource == "cpu", now=now, target_average=wanted)
            return outcome.replicas, {"averageValue": milli_quantity(outcome.raw)}
        raise calc.MetricsError(
            "invalid resource metric source: neither a utilization target nor a value target was set"
        )

    def _sample(self, pod: Obj, resource: str, only: str | None = None) -> calc.PodSample:
        """The calculator's view of ``pod`` (only container ``only``'s request and usage when given)."""
        meta, status = pod["metadata"], pod.get("status") or {}
        request: int | None = 0
        for container in (pod.get("spec") or {}).get("containers") or []:
            if only is not None and container.get("name") != only:
                continue
            value = ((container.get("resources") or {}).get("requests") or {}).get(resource)
            if value is None or request is None:
                request = None
                continue
            request += int(quantity(value) * 1000)
        value = timestamp = None
        window = self.scraper.resolution
        measured = self.scraper.pod(meta["uid"]) if status.get("phase") == "Running" else None
        used = [c for c in measured.containers if only is None or c.name == only] if measured else []
        if used and resource in ("cpu", "memory"):  # all that metrics.k8s.io reports
            if resource == "cpu":
                value = sum(c.nanocores for c in used) // 1_000_000
            else:
                value = sum(c.memory_bytes for c in used) * 1000
            assert measured is not None
            timestamp, window = measured.timestamp, measured.window_seconds
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
        return calc.PodSample(
            name=meta["name"],
            phase=status.get("phase", "Pending"),
            deleting=bool(meta.get("deletionTimestamp")),
            request=request,
            value=value,
            ready=None if ready is None else ready.get("status") == "True",
            ready_since=_time(ready.get("lastTransitionTime")) if ready else None,
            started=_time(status.get("startTime")),
            timestamp=timestamp,
            window=timedelta(seconds=window),
        )

    def _write(self, hpa: Obj, status: Obj) -> None:
        status.setdefault("desiredReplicas", 0)  # not omitempty in the Go type: clients require it
        if status == (hpa.get("status") or {}):
            return
        meta = hpa["metadata"]
        body = {"metadata": {"name": meta["name"], "namespace": meta["namespace"]}, "status": status}
        with contextlib.suppress(errors.NotFound, errors.Conflict):
            self.store.update(HPAS, body, subresource="status")


def setcondition(conditions: list[Obj], kind: str, value: bool, reason: str, message: str, stamp: str) -> None:
    """``setCondition``: the transition time moves only when the status does."""
    text = "True" if value else "False"
    for existing in conditions:
        if existing["type"] == kind:
            if existing["status"] != text:
                existing["lastTransitionTime"] = stamp
            existing.update(status=text, reason=reason, message=message)
            return
    conditions.append({"type": kind, "status": text, "lastTransitionTime": stamp, "reason": reason, "message": message})
