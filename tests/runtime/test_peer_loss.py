"""``runtime.peer_loss`` in real pods: a survivor whose peer pod is deleted saves, waits, and without a group restart
exits with the peer-lost code, which ``classify()`` of the pod as the API reports it reads as rule ``peer-lost``."""

from __future__ import annotations

import socket
import sys

from airflow_elastic.preemption.classify import Budget, Cause, classify
from airflow_elastic.runtime import PEER_LOST_EXIT_CODE
from tests.support.waiting import wait_for

PEER = """
import socket, sys, time

server = socket.create_server(("0.0.0.0", int(sys.argv[1])))
connection, _ = server.accept()
time.sleep(600)  # until deleted
"""
SURVIVOR = """
import socket, sys
from airflow_elastic import runtime

peer = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
peer.settimeout(None)
with runtime.peer_loss(lambda: print("saved the emergency checkpoint of step 7", flush=True), wait=0.5):
    print("training", flush=True)
    if not peer.recv(1):
        raise ConnectionResetError("the peer closed the connection")
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def pod(name: str, code: str, *args: str) -> dict:
    container = {"name": "trainer", "image": "python:3.11", "command": [sys.executable, "-c", code], "args": list(args)}
    return {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": [container]}}


def test_a_survivor_without_a_group_restart_exits_peer_lost(core, api_client, namespace):
    port = str(free_port())
    core.create_namespaced_pod(namespace, pod("peer", PEER, port))
    ip = wait_for(lambda: core.read_namespaced_pod("peer", namespace).status.pod_ip, what="the peer's IP")
    core.create_namespaced_pod(namespace, pod("survivor", SURVIVOR, ip, port))
    wait_for(lambda: "training" in core.read_namespaced_pod_log("survivor", namespace), what="the survivor training")
    assert core.read_namespaced_pod("survivor", namespace).status.phase == "Running"  # until its peer goes
    core.delete_namespaced_pod("peer", namespace, grace_period_seconds=0)

    def failed() -> dict | None:
        survivor = api_client.sanitize_for_serialization(core.read_namespaced_pod("survivor", namespace))
        return survivor if survivor["status"]["phase"] == "Failed" else None

    survivor = wait_for(failed, timeout=60, what="the survivor to fail")
    [status] = survivor["status"]["containerStatuses"]
    assert status["state"]["terminated"]["exitCode"] == PEER_LOST_EXIT_CODE, status
    logs = core.read_namespaced_pod_log("survivor", namespace)
    assert "saved the emergency checkpoint of step 7" in logs, logs
    verdict = classify(survivor, api_client.sanitize_for_serialization(core.read_node(survivor["spec"]["nodeName"])))
    assert (verdict.rule, verdict.cause, verdict.budget) == ("peer-lost", Cause.UNKNOWN, Budget.FAILURE), verdict
