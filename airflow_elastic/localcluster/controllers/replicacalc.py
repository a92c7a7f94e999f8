"""The HPA controller's arithmetic, as kube-controller-manager does it (pure: no store, time passed in).

``resource_replicas`` is ``ReplicaCalculator.GetResourceReplicas`` / ``GetRawResourceReplicas`` and ``groupPods`` of
kubernetes ``pkg/controller/podautoscaler/replica_calculator.go`` with ``GetResourceUtilizationRatio`` /
``GetMetricUsageRatio`` of ``metrics/utilization.go``: pods being deleted or failed are ignored, pending ones and (for
CPU) not-yet-ready ones are "unready", pods without a sample are "missing"; within the 0.1 tolerance nothing moves; on
a scale-up unready and missing pods count as using nothing, on a scale-down missing ones as using their request, and a
recount that would change direction keeps the current size. ``Recommender`` is ``horizontal.go``'s
``stabilizeRecommendation`` (no ``behavior``: the 300 s downscale window, then ``convertDesiredReplicasWithRules``:
``max(2 x current, 4)`` per sync) and ``normalizeDesiredReplicasWithBehaviors``
(``stabilizeRecommendationWithBehaviors``, ``convertDesiredReplicasWithBehaviorRate`` with
``calculateScaleUpLimitWithScalingRules`` / ``calculateScaleDownLimitWithBehaviors`` over the scale events of each
policy's period), with behaviour defaults of ``pkg/apis/autoscaling/v2/defaults.go``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

TOLERANCE = 0.1  # --horizontal-pod-autoscaler-tolerance
CPU_INITIALIZATION_PERIOD = timedelta(minutes=5)  # --horizontal-pod-autoscaler-cpu-initialization-period
INITIAL_READINESS_DELAY = timedelta(seconds=30)  # --horizontal-pod-autoscaler-initial-readiness-delay
DOWNSCALE_STABILIZATION = 300  # --horizontal-pod-autoscaler-downscale-stabilization (seconds)
SCALE_UP_LIMIT_FACTOR, SCALE_UP_LIMIT_MINIMUM = 2.0, 4  # horizontal.go, without behavior
#: defaults.go: scale up by 100 % or 4 pods per 15 s (the larger), no window; scale down 100 % per 15 s.
DEFAULT_SCALE_UP = {
    "stabilizationWindowSeconds": 0,
    "selectPolicy": "Max",
    "policies": [
        {"type": "Percent", "value": 100, "periodSeconds": 15},
        {"type": "Pods", "value": 4, "periodSeconds": 15},
    ],
}
DEFAULT_SCALE_DOWN = {"selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}


#: The reasons and messages of the AbleToScale and ScalingLimited conditions, as horizontal.go words them.
MESSAGES = {
    "ScaleDownStabilized": (
        "recent recommendations were higher than current one, applying the highest recent recommendation"
    ),
    "ScaleUpStabilized": (
        "recent recommendations were lower than current one, applying the lowest recent recommendation"
    ),
    "ScaleUpLimit": "the desired replica count is increasing faster than the maximum scale rate",
    "ScaleDownLimit": "the desired replica count is decreasing faster than the maximum scale rate",
    "TooManyReplicas": "the desired replica count is more than the maximum replica count",
    "TooFewReplicas": "the desired replica count is less than the minimum replica count",
    "DesiredWithinRange": "the desired count is within the acceptable range",
    "ReadyForNewScale": "recommended size matches current size",
}


def _why(reason: str) -> tuple[str, str]:
    return reason, MESSAGES[reason]


class MetricsError(Exception):
    """No replica count can be computed from the samples (the message is upstream's)."""


@dataclass(frozen=True)
class PodSample:
    """One pod as the calculator sees it: phase, readiness and its metric (milli-units), if any."""

    name: str
    phase: str = "Running"
    deleting: bool = False
    request: int | None = None  # sum of the containers' requests (milli); None when a container has none
    value: int | None = None  # the sample (milli), None when the metrics API has none
    ready: bool | None = True  # the Ready condition's status, None without the condition
    ready_since: datetime | None = None  # the Ready condition's lastTransitionTime
    started: datetime | None = None  # status.startTime
    timestamp: datetime | None = None  # of the sample
    window: timedelta = timedelta(seconds=15)


@dataclass(frozen=True)
class Outcome:
    replicas: int
    utilization: int  # percent of request (Utilization targets) or the average (AverageValue targets, milli)
    raw: int  # average value (milli)


def group_pods(pods: list[PodSample], cpu: bool, now: datetime) -> tuple[int, set[str], set[str], set[str]]:
    """``groupPods``: (ready count, unready, missing, ignored)."""
    ready, unready, missing, ignored = 0, set(), set(), set()
    for pod in pods:
        if pod.deleting or pod.phase == "Failed":
            ignored.add(pod.name)
            continue
        if pod.phase == "Pending":
            unready.add(pod.name)
            continue
        if pod.value is None:
            missing.add(pod.name)
            continue
        if cpu:
            if pod.ready is None or pod.started is None or pod.ready_since is None:
                not_ready = True
            elif pod.started + CPU_INITIALIZATION_PERIOD > now:
                # in the initialisation period: no sample until one full window after the last readiness change
                assert pod.timestamp is not None
                not_ready = not pod.ready or pod.timestamp < pod.ready_since + pod.window
            else:  # unready and never been ready
                not_ready = not pod.ready and pod.started + INITIAL_READINESS_DELAY > pod.ready_since
            if not_ready:
                unready.add(pod.name)
                continue
        ready += 1
    return ready, unready, missing, ignored


def _utilization(values: dict[str, int], requests: dict[str, int], target: int) -> tuple[float, int, int]:
    """``GetResourceUtilizationRatio``: (ratio, utilization %, raw average); the ratio uses the truncated %."""
    pairs = [(v, requests[name]) for name, v in values.items() if name in requests]
    total_requests = sum(r for _, r in pairs)
    if total_requests == 0:
        raise MetricsError("no metrics returned matched known pods")
    total = sum(v for v, _ in pairs)
    utilization = int(total * 100 / total_requests)
    return utilization / target, utilization, int(total / len(pairs))


def _average(values: dict[str, int], target: int) -> tuple[float, int]:
    """``GetMetricUsageRatio``: (ratio, average)."""
    average = int(sum(values.values()) / len(values))
    return average / target, average


def _pod_requests(pods: list[PodSample], cpu: bool) -> dict[str, int]:
    """``calculatePodRequests``: each pod's request of the resource; a pod without one fails the metric."""
    requests: dict[str, int] = {}
    for pod in pods:
        if pod.request is None:
            raise MetricsError(f"missing request for {'cpu' if cpu else 'memory'} in container of pod {pod.name}")
        requests[pod.name] = pod.request
    return requests


def resource_replicas(
    current: int,
    pods: list[PodSample],
    *,
    cpu: bool,
    now: datetime,
    target_utilization: int | None = None,
    target_average: int | None = None,
    tolerance: float = TOLERANCE,
) -> Outcome:
    """Replicas for a Resource metric: ``target_utilization`` (percent of requests) or ``target_average`` (milli)."""
    if not pods:
        raise MetricsError("no pods returned by selector while calculating replica count")
    ready, unready, missing, ignored = group_pods(pods, cpu, now)
    values = {p.name: p.value for p in pods if p.value is not None and p.name not in unready | ignored}
    if not values:
        raise MetricsError("did not receive metrics for any ready pods")
    requests = _pod_requests(pods, cpu) if target_utilization is not None else {}

    def ratio_of(samples: dict[str, int]) -> tuple[float, int, int]:
        if target_utilization is not None:
            return _utilization(samples, requests, target_utilization)
        ratio, average = _average(samples, target_average or 1)
        return ratio, average, average

    ratio, utilization, raw = ratio_of(values)
    rebalance = bool(unready) and ratio > 1.0
    if not rebalance and not missing:
        if abs(1.0 - ratio) <= tolerance:
            return Outcome(current, utilization, raw)
        return Outcome(math.ceil(ratio * ready), utilization, raw)
    if missing:
        for name in missing:  # scale-down: missing pods use 100 % of their request (of the target); up: nothing
            full = requests.get(name, 0) if target_utilization is not None else (target_average or 0)
            values[name] = full if ratio < 1.0 else 0
    if rebalance:
        for name in unready:
            values[name] = 0
    new_ratio = ratio_of(values)[0]
    if abs(1.0 - new_ratio) <= tolerance or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return Outcome(current, utilization, raw)  # too small, or the recount changes direction
    replicas = math.ceil(new_ratio * len(values))
    if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
        return Outcome(current, utilization, raw)
    return Outcome(replicas, utilization, raw)


# ------------------------------------------------------------------------------------------------ normalisation


@dataclass
class Decision:
    replicas: int
    able: tuple[str, str]  # AbleToScale (reason, message)
    limited: tuple[bool, str, str]  # ScalingLimited (status, reason, message)


def with_defaults(behavior: dict[str, Any] | None) -> dict[str, Any] | None:
    """``SetDefaults_HorizontalPodAutoscalerBehavior``: fill what a given ``behavior`` leaves out."""
    if behavior is None:
        return None
    up = {**DEFAULT_SCALE_UP, **{k: v for k, v in (behavior.get("scaleUp") or {}).items() if v is not None}}
    down = {**DEFAULT_SCALE_DOWN, **{k: v for k, v in (behavior.get("scaleDown") or {}).items() if v is not None}}
    down.setdefault("stabilizationWindowSeconds", DOWNSCALE_STABILIZATION)  # maybeInitScaleDownStabilizationWindow
    return {"scaleUp": up, "scaleDown": down}


@dataclass
class Recommender:
    """Per-HPA memory of recommendations and scale events (``a.recommendations``, ``a.scaleUpEvents``...)."""

    downscale_window: float = DOWNSCALE_STABILIZATION
    recommendations: list[tuple[int, datetime]] = field(default_factory=list)
    up_events: list[tuple[int, datetime]] = field(default_factory=list)
    down_events: list[tuple[int, datetime]] = field(default_factory=list)

    def _record(self, desired: int, now: datetime, older_than: datetime) -> None:
        for i, (_, stamp) in enumerate(self.recommendations):
            if stamp < older_than:
                self.recommendations[i] = (desired, now)
                return
        self.recommendations.append((desired, now))

    def normalize(
        self, behavior: dict[str, Any] | None, current: int, desired: int, low: int, high: int, now: datetime
    ) -> Decision:
        """``normalizeDesiredReplicas`` (no behavior) or ``normalizeDesiredReplicasWithBehaviors``."""
        if behavior is None:
            return self._legacy(current, desired, low, high, now)
        return self._with_behavior(with_defaults(behavior) or {}, current, desired, low, high, now)

    def _legacy(self, current: int, desired: int, low: int, high: int, now: datetime) -> Decision:
        cutoff = now - timedelta(seconds=self.downscale_window)
        stabilized = max([desired] + [r for r, stamp in self.recommendations if stamp >= cutoff])
        self._record(desired, now, cutoff)
        able = _why("ScaleDownStabilized") if stabilized != desired else _why("ReadyForNewScale")
        up_limit = max(int(SCALE_UP_LIMIT_FACTOR * current), SCALE_UP_LIMIT_MINIMUM)
        if high > up_limit:
            ceiling, reason = up_limit, _why("ScaleUpLimit")
        else:
            ceiling, reason = high, _why("TooManyReplicas")
        if stabilized < low:
            result, reason = low, _why("TooFewReplicas")
        elif stabilized > ceiling:
            result = ceiling
        else:
            result, reason = stabilized, _why("DesiredWithinRange")
        return Decision(result, able, (result != stabilized, *reason))

    def _stabilize(
        self, behavior: dict[str, Any], current: int, desired: int, now: datetime
    ) -> tuple[int, tuple[str, str]]:
        up_cutoff = now - timedelta(seconds=behavior["scaleUp"]["stabilizationWindowSeconds"])
        down_cutoff = now - timedelta(seconds=behavior["scaleDown"]["stabilizationWindowSeconds"])
        up, down = desired, desired
        for rec, stamp in self.recommendations:
            if stamp > up_cutoff:
                up = min(rec, up)
            if stamp > down_cutoff:
                down = max(rec, down)
        recommendation = min(max(current, up), down)
        self._record(desired, now, min(up_cutoff, down_cutoff))
        return recommendation, _why("ScaleUpStabilized" if desired >= current else "ScaleDownStabilized")

    def _with_behavior(
        self, behavior: dict[str, Any], current: int, desired: int, low: int, high: int, now: datetime
    ) -> Decision:
        stabilized, reason = self._stabilize(behavior, current, desired, now)
        able = reason if stabilized != desired else _why("ReadyForNewScale")
        result, limit = stabilized, _why("DesiredWithinRange")
        if stabilized > current:
            up_limit = max(self._limit(behavior["scaleUp"], current, now, up=True), current)
            if high > up_limit:
                ceiling, why = up_limit, _why("ScaleUpLimit")
            else:
                ceiling, why = high, _why("TooManyReplicas")
            if stabilized > ceiling:
                result, limit = ceiling, why
        elif stabilized < current:
            down_limit = min(self._limit(behavior["scaleDown"], current, now, up=False), current)
            if low < down_limit:
                floor, why = down_limit, _why("ScaleDownLimit")
            else:
                floor, why = low, _why("TooFewReplicas")
            if stabilized < floor:
                result, limit = floor, why
        return Decision(result, able, (result != stabilized, *limit))

    def _limit(self, rules: dict[str, Any], current: int, now: datetime, *, up: bool) -> int:
        """``calculateScaleUpLimitWithScalingRules`` / ``calculateScaleDownLimitWithBehaviors``."""
        select = rules.get("selectPolicy", "Max")
        if select == "Disabled":
            return current
        # scaling up, Max picks the largest proposal; scaling down, Max picks the smallest (the largest change)
        pick = max if (select != "Min") == up else min
        proposals = []
        for policy in rules.get("policies") or []:
            since = now - timedelta(seconds=policy["periodSeconds"])
            added = sum(n for n, stamp in self.up_events if stamp > since)
            removed = sum(n for n, stamp in self.down_events if stamp > since)
            start = current - added + removed
            if policy["type"] == "Pods":
                proposals.append(start + policy["value"] if up else start - policy["value"])
            elif up:
                proposals.append(math.ceil(start * (1 + policy["value"] / 100)))
            else:
                proposals.append(int(start * (1 - policy["value"] / 100)))
        return pick(proposals) if proposals else current

    def scaled(self, behavior: dict[str, Any] | None, current: int, desired: int, now: datetime) -> None:
        """``storeScaleEvent``: remember a rescale (dropping events older than the longest policy period)."""
        if behavior is None:
            return
        behavior = with_defaults(behavior) or {}
        up = desired > current
        events = self.up_events if up else self.down_events
        rules = behavior["scaleUp" if up else "scaleDown"]
        longest = max([p["periodSeconds"] for p in rules.get("policies") or []] or [0])
        events[:] = [(n, stamp) for n, stamp in events if stamp > now - timedelta(seconds=longest)]
        events.append((abs(desired - current), now))
