"""Table printers as upstream ``printers.go``/``HumanDuration`` for states the local kubelet does not produce."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from airflow_elastic.localcluster.api.humanize import human_duration
from airflow_elastic.localcluster.api.podprinter import pod_cells
from airflow_elastic.localcluster.api.printers import job_cells, node_cells, service_cells


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (119, "119s"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 + 300, "3h5m"),
        (30 * 3600, "30h"),
        (3 * 86400 + 4 * 3600, "3d4h"),
        (400 * 86400, "400d"),
        (3 * 365 * 86400, "3y"),
    ],
)
def test_human_duration(seconds: int, shown: str) -> None:
    assert human_duration(seconds) == shown


def stamp(ago: float = 0) -> str:
    return (datetime.now(UTC) - timedelta(seconds=ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(status: dict, **spec) -> dict:
    return {
        "metadata": {"name": "p", "creationTimestamp": stamp()},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}], **spec},
        "status": status,
    }


def test_pod_status_rules() -> None:
    running = {"state": {"running": {}}, "ready": True, "restartCount": 0}
    completed = {"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}, "restartCount": 0}
    cells = pod_cells(pod({"phase": "Running", "containerStatuses": [completed, running]}))
    assert cells[1:3] == ["1/2", "NotReady"]  # "Completed" becomes NotReady while a container runs and Ready is unset
    signalled = {"state": {"terminated": {"exitCode": 137, "signal": 9}}, "restartCount": 2}
    signalled["lastState"] = {"terminated": {"finishedAt": stamp(150)}}
    cells = pod_cells(pod({"phase": "Failed", "containerStatuses": [running, signalled]}))
    assert cells[2:4] == ["Signal:9", "2 (2m30s ago)"]
    init = {"name": "init", "state": {"waiting": {"reason": "PodInitializing"}}}
    waiting = pod({"phase": "Pending", "initContainerStatuses": [init]}, initContainers=[{"name": "init"}])
    assert pod_cells(waiting)[2] == "Init:0/1"
    init["state"] = {"terminated": {"exitCode": 3}}
    assert pod_cells(waiting)[2] == "Init:ExitCode:3"
    sidecar = {"name": "init", "state": {"running": {}}, "started": True, "ready": True}
    with_sidecar = pod(
        {"phase": "Running", "initContainerStatuses": [sidecar], "containerStatuses": [running, running]},
        initContainers=[{"name": "init", "restartPolicy": "Always"}],
    )
    assert pod_cells(with_sidecar)[1] == "3/3"  # a sidecar counts among the containers
    gated = pod({"phase": "Pending", "conditions": [{"type": "PodScheduled", "reason": "SchedulingGated"}]})
    assert pod_cells(gated)[2] == "SchedulingGated"
    lost = pod({"phase": "Running", "reason": "NodeLost"})
    lost["metadata"]["deletionTimestamp"] = stamp()
    assert pod_cells(lost)[2] == "Unknown"


def test_node_job_and_service_rules() -> None:
    node = {"metadata": {"name": "n", "labels": {"node-role.kubernetes.io/control-plane": ""}}, "spec": {}}
    node["spec"]["unschedulable"] = True
    node["status"] = {"conditions": [{"type": "Ready", "status": "False"}], "nodeInfo": {"kubeletVersion": "v1.33.0"}}
    assert node_cells(node)[1:3] == ["NotReady,SchedulingDisabled", "control-plane"]
    job = {"metadata": {"name": "j"}, "spec": {"parallelism": 3, "template": {}}}
    job["status"] = {"succeeded": 1, "conditions": [{"type": "FailureTarget", "status": "True"}]}
    assert job_cells(job)[1:4] == ["FailureTarget", "1/1 of 3", ""]
    lb = {"metadata": {"name": "s"}, "spec": {"type": "LoadBalancer", "clusterIPs": ["10.0.0.7"]}}
    lb["spec"]["ports"] = [{"port": 443, "nodePort": 30443}]
    assert service_cells(lb)[1:5] == ["LoadBalancer", "10.0.0.7", "<pending>", "443:30443/TCP"]
