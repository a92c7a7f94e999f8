"""The taint manager's clock for a pod on a not-ready/unreachable node: the pod's own ``tolerationSeconds`` decide,
and the DefaultTolerationSeconds default applies only to a pod that declares no such toleration (the plugin's rule:
the taint's key or none, effect ``NoExecute`` or none)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.faults.nodelifecycle import NOT_READY, UNREACHABLE, TaintManager
from airflow_elastic.localcluster.store import Store


def manager(default: float) -> TaintManager:
    store = Store()
    taints = TaintManager(store, Recorder(store))
    taints.default_toleration_seconds = default
    return taints


def taint(key: str, seconds_ago: float = 0.0) -> dict[str, Any]:
    added = (datetime.now(UTC) - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"key": key, "effect": "NoExecute", "timeAdded": added}


def pod(*tolerations: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"tolerations": list(tolerations)}}


def node_loss(key: str = UNREACHABLE, **fields: Any) -> dict[str, Any]:
    return {"key": key, "operator": "Exists", "effect": "NoExecute", **fields}


@pytest.mark.parametrize("default", [1.0, 300.0])
def test_a_pods_own_toleration_seconds_decide_whatever_the_default(default: float):
    taints = manager(default)
    assert 28 <= taints._wait(pod(node_loss(tolerationSeconds=30)), taint(UNREACHABLE)) <= 30
    assert 598 <= taints._wait(pod(node_loss(tolerationSeconds=600)), taint(UNREACHABLE)) <= 600
    # The clock runs from the taint's timeAdded; 0 and negative seconds mean at once.
    assert 8 <= taints._wait(pod(node_loss(tolerationSeconds=30)), taint(UNREACHABLE, seconds_ago=20)) <= 11
    assert taints._wait(pod(node_loss(tolerationSeconds=0)), taint(UNREACHABLE)) == 0
    assert taints._wait(pod(node_loss(tolerationSeconds=-5)), taint(UNREACHABLE)) == 0
    # The shortest of several matching tolerations wins, as upstream's getMinTolerationTime.
    both = pod(node_loss(tolerationSeconds=600), {"operator": "Exists", "tolerationSeconds": 30})
    assert 28 <= taints._wait(both, taint(UNREACHABLE)) <= 30


def test_a_pod_that_declares_none_gets_the_default_per_taint():
    taints = manager(300)
    assert 298 <= taints._wait(pod(), taint(UNREACHABLE)) <= 300
    assert 298 <= taints._wait(pod(), taint(NOT_READY)) <= 300
    # A NoSchedule toleration of the key is not one for NoExecute; one for unreachable says nothing about not-ready.
    assert 298 <= taints._wait(pod(node_loss(effect="NoSchedule")), taint(UNREACHABLE)) <= 300
    assert 298 <= taints._wait(pod(node_loss(tolerationSeconds=5)), taint(NOT_READY)) <= 300
    # Other NoExecute taints get no default: untolerated, the pod goes at once.
    assert taints._wait(pod(), taint("dedicated")) == 0


def test_a_declared_toleration_without_seconds_or_without_a_key_is_forever():
    taints = manager(1)
    assert taints._wait(pod(node_loss()), taint(UNREACHABLE)) is None
    assert taints._wait(pod({"key": UNREACHABLE, "operator": "Exists"}), taint(UNREACHABLE)) is None
    assert taints._wait(pod({"operator": "Exists"}), taint(NOT_READY)) is None


def test_a_declared_toleration_that_does_not_match_gets_no_default():
    """DefaultTolerationSeconds adds nothing to a pod with a toleration of the key (its value is not looked at), and
    that toleration does not tolerate the value-less taint: the pod is evicted at once, not after the default."""
    wrong_value = {"key": UNREACHABLE, "operator": "Equal", "value": "x", "effect": "NoExecute"}
    assert manager(300)._wait(pod(wrong_value), taint(UNREACHABLE)) == 0
