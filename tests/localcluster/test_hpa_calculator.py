"""The HPA controller's arithmetic (``controllers/replicacalc.py``) against upstream's own tables, and the metrics API's
quantity formats. Pure: no cluster.

Cases mirror kubernetes ``pkg/controller/podautoscaler/replica_calculator_test.go`` (``TestReplicaCalcScaleUp``,
``...ScaleUpUnreadyLessScale``, ``...ScaleUpPending``, ``...ScaleUpIgnoresFailedPods``, ``...ScaleDown``,
``...Tolerance``, ``...MissingMetrics``, ``...MissingRequest``) with one container per pod, and ``horizontal_test.go``
(``TestScalingWithRules``, ``TestNormalizeDesiredReplicasWithBehavior``, ``TestStabilizeRecommendationWithBehaviors``,
the legacy ``TestUpscaleCap``/``TestScaleDownStabilization`` path).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from airflow_elastic.localcluster.api.metrics import cpu_quantity, go_duration, memory_quantity
from airflow_elastic.localcluster.controllers import replicacalc as calc
from airflow_elastic.localcluster.controllers.podautoscaler import milli_quantity
from airflow_elastic.localcluster.kubelet.stats import Sample, usage

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
LONG_AGO = NOW - timedelta(minutes=10)  # out of the CPU initialisation period


def pods(levels, requests=None, ready=None, phases=None, started=LONG_AGO):
    """Pods ``p0..`` with CPU samples ``levels`` (milli; None: no sample), 1 CPU requested each by default."""
    count = max(len(levels), len(requests or []), len(ready or []), len(phases or []))
    made = []
    for i in range(count):
        made.append(
            calc.PodSample(
                name=f"p{i}",
                phase=(phases or ["Running"] * count)[i],
                request=(requests or [1000] * count)[i],
                value=levels[i] if i < len(levels) else None,
                ready=(ready or [True] * count)[i],
                ready_since=started,
                started=started,
                timestamp=NOW - timedelta(seconds=5),
            )
        )
    return made


def replicas(current, samples, target=30, **kwargs):
    return calc.resource_replicas(current, samples, cpu=True, now=NOW, target_utilization=target, **kwargs)


def test_scale_up():
    outcome = replicas(3, pods([300, 500, 700]))
    assert (outcome.replicas, outcome.utilization, outcome.raw) == (5, 50, 500)


def test_scale_up_counts_unready_pods_as_idle():
    """``TestReplicaCalcScaleUpUnreadyLessScale``: the unready pod is rebalanced at 0 %: 4, not 6."""
    outcome = replicas(3, pods([300, 500, 700], ready=[False, True, True]))
    assert (outcome.replicas, outcome.utilization) == (4, 60)


def test_scale_up_pending_and_failed_pods():
    assert replicas(3, pods([300, 500, 700], phases=["Pending", "Running", "Running"])).replicas == 4
    failed = pods([500, 700, None, None], phases=["Running", "Running", "Failed", "Failed"])
    assert (replicas(2, failed).replicas, replicas(2, failed).utilization) == (4, 60)


def test_pods_within_cpu_initialisation_wait_a_full_window_after_becoming_ready():
    """``groupPods``: a pod started 10 s ago, ready 8 s ago, sampled over 15 s: its sample is ignored."""
    young = NOW - timedelta(seconds=10)
    samples = pods([300, 500, 700])
    samples[0] = calc.PodSample("p0", request=1000, value=3000, ready_since=young, started=young, timestamp=NOW)
    assert replicas(3, samples).utilization == 60  # p0's 300 % is not counted


def test_scale_down_and_tolerance():
    outcome = replicas(5, pods([100, 300, 500, 250, 250]), target=50)
    assert (outcome.replicas, outcome.utilization) == (3, 28)
    steady = pods([1010, 1030, 1020], requests=[900, 1000, 1100])
    assert replicas(3, steady, target=100).replicas == 3  # 102 %: within the 0.1 tolerance
    assert replicas(3, steady, target=100, tolerance=0.01).replicas == 4


def test_missing_metrics_count_as_their_request_on_a_scale_down():
    outcome = replicas(4, pods([400, 95, None, None]), target=100)
    assert (outcome.replicas, outcome.utilization) == (3, 24)


def test_missing_metrics_that_would_reverse_direction_keep_the_size():
    """Scale-up by the sampled pods, but the missing ones at 0 % bring the ratio below 1: no change."""
    assert replicas(4, pods([1200, None, None, None]), target=100).replicas == 4


def test_errors_are_upstreams():
    with pytest.raises(calc.MetricsError, match="missing request for cpu"):
        replicas(2, pods([100, 100], requests=[1000, None]))
    with pytest.raises(calc.MetricsError, match="did not receive metrics for any ready pods"):
        replicas(2, pods([None, None]))
    with pytest.raises(calc.MetricsError, match="no pods returned by selector"):
        replicas(2, [])


def test_average_value_targets():
    outcome = calc.resource_replicas(2, pods([400, 600]), cpu=True, now=NOW, target_average=250)
    assert (outcome.replicas, outcome.raw) == (4, 500)


# ------------------------------------------------------------------------------------------------ normalisation


def test_without_behavior_scale_up_is_capped_and_scale_down_waits_300s():
    rec = calc.Recommender()
    up = rec.normalize(None, 2, 20, 1, 50, NOW)
    assert up.replicas == 4 and up.limited[:2] == (True, "ScaleUpLimit")  # max(2 x 2, 4)
    rec = calc.Recommender()
    assert rec.normalize(None, 5, 5, 1, 10, NOW).replicas == 5
    later = rec.normalize(None, 5, 2, 1, 10, NOW + timedelta(seconds=299))
    assert later.replicas == 5 and later.able[0] == "ScaleDownStabilized"
    assert rec.normalize(None, 5, 2, 1, 10, NOW + timedelta(seconds=601)).replicas == 2


def test_default_behavior_rates():
    """``TestScalingWithRules``: 100 % or 4 pods per 15 s up (the larger), 100 % down, clamped to min/max."""
    behavior = {"scaleDown": {"stabilizationWindowSeconds": 0}}
    assert calc.Recommender().normalize(behavior, 10, 50, 1, 1000, NOW).replicas == 20
    assert calc.Recommender().normalize(behavior, 1, 50, 1, 1000, NOW).replicas == 5
    capped = calc.Recommender().normalize(behavior, 10, 50, 1, 15, NOW)
    assert capped.replicas == 15 and capped.limited[:2] == (True, "TooManyReplicas")
    floor = calc.Recommender().normalize(behavior, 10, 1, 3, 15, NOW)
    assert floor.replicas == 3 and floor.limited[:2] == (True, "TooFewReplicas")


def test_policies_count_the_scale_events_of_their_period():
    behavior = {"scaleUp": {"policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}]}}
    rec = calc.Recommender()
    first = rec.normalize(behavior, 2, 10, 1, 20, NOW)
    assert first.replicas == 4 and first.limited[1] == "ScaleUpLimit"
    rec.scaled(behavior, 2, 4, NOW)
    assert rec.normalize(behavior, 4, 10, 1, 20, NOW + timedelta(seconds=30)).replicas == 4  # 2 already added
    assert rec.normalize(behavior, 4, 10, 1, 20, NOW + timedelta(seconds=61)).replicas == 6
    select_min = {"scaleDown": {"selectPolicy": "Disabled"}}
    assert calc.Recommender().normalize(select_min, 5, 1, 1, 10, NOW).replicas == 5


def test_stabilization_windows_on_the_given_clock():
    """``stabilizeRecommendationWithBehaviors``: the highest recommendation of the down window, the lowest of the up
    window, between which the current size stays."""
    behavior = {"scaleDown": {"stabilizationWindowSeconds": 60}, "scaleUp": {"stabilizationWindowSeconds": 30}}
    rec = calc.Recommender()
    assert rec.normalize(behavior, 4, 4, 1, 10, NOW).replicas == 4
    held = rec.normalize(behavior, 4, 1, 1, 10, NOW + timedelta(seconds=20))
    assert held.replicas == 4 and held.able[0] == "ScaleDownStabilized"
    assert rec.normalize(behavior, 4, 1, 1, 10, NOW + timedelta(seconds=61)).replicas == 1
    rec = calc.Recommender()
    rec.normalize(behavior, 2, 2, 1, 10, NOW)
    slow = rec.normalize(behavior, 2, 6, 1, 10, NOW + timedelta(seconds=10))
    assert slow.replicas == 2 and slow.able[0] == "ScaleUpStabilized"
    assert rec.normalize(behavior, 2, 6, 1, 10, NOW + timedelta(seconds=31)).replicas == 6  # +4 pods allowed


def test_defaults_fill_a_partial_behavior():
    filled = calc.with_defaults({"scaleUp": {"stabilizationWindowSeconds": 5}})
    assert filled["scaleDown"]["stabilizationWindowSeconds"] == 300
    assert filled["scaleUp"]["policies"] == calc.DEFAULT_SCALE_UP["policies"]


# ------------------------------------------------------------------------------------------------ metrics formats


def test_quantities_as_metrics_server_writes_them():
    assert [cpu_quantity(n) for n in (0, 12345, 5_000_000, 2_000_000_000)] == ["0", "12345n", "5m", "2"]
    assert [memory_quantity(b) for b in (12288 * 1024 + 4096, 3 * 2**20, 1000)] == ["12292Ki", "3Mi", "1000"]
    assert [go_duration(s) for s in (15.0021, 60, 0.5, 3725)] == ["15.0021s", "1m0s", "0.5s", "1h2m5s"]
    assert [milli_quantity(m) for m in (250, 1000, 52428800000, 5_000_000_000)] == ["250m", "1", "52428800", "5M"]


def test_cpu_rate_between_two_scrapes():
    before = {"main": Sample(10.0, 4096, NOW)}
    after = {"main": Sample(10.5, 8192, NOW + timedelta(seconds=2))}
    measured = usage(before, after)
    assert measured is not None and measured.window_seconds == 2.0
    assert (measured.containers[0].nanocores, measured.containers[0].memory_bytes) == (250_000_000, 8192)
    assert usage({}, after) is None  # one scrape is no rate
