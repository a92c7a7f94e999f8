"""Evidence over pod lists: stops the JobSet makes itself never explain an attempt (docs/preemption.md §1.4)."""

from __future__ import annotations

from typing import Any

from airflow_elastic.evidence import Evidence, attempt_causes, describe

RESTART = "jobset.sigs.k8s.io/restart-attempt"
ROLE = "jobset.sigs.k8s.io/replicatedjob-name"


def pod(
    name: str, phase: str, *, attempt: int = 0, role: str = "worker", exit_code: int | None = None
) -> dict[str, Any]:
    state: dict[str, Any] = {"running": {"startedAt": "2026-03-01T10:00:00Z"}}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "finishedAt": "2026-03-01T10:05:00Z"}}
    return {
        "metadata": {"name": name, "uid": name, "labels": {RESTART: str(attempt), ROLE: role}},
        "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 30},
        "status": {"phase": phase, "containerStatuses": [{"name": "trainer", "state": state}]},
    }


def jobset(restarts: int = 0, completed: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {"restarts": restarts}
    if completed:
        status["terminalState"] = "Completed"
    return {"metadata": {"name": "g"}, "status": status}


NODES = {"n1": {"metadata": {"name": "n1"}, "spec": {}}}


def see(evidence: Evidence, pods: list[dict[str, Any]], group: dict[str, Any]) -> list[dict[str, Any]]:
    return evidence.record(evidence.observe(pods), NODES, jobset=group)


def test_a_group_restart_charges_the_pod_that_caused_it_and_reports_the_others_as_the_restart() -> None:
    evidence = Evidence()
    see(evidence, [pod("leader", "Running", role="leader"), pod("w0", "Running"), pod("w1", "Running")], jobset())
    # w0 failed; the JobSet restarted the group and deleted leader and w1 (attempt 0) before the next list.
    records = see(evidence, [pod("w0", "Failed", exit_code=1), pod("w1-new", "Pending", attempt=1)], jobset(1))
    by_pod = {r["pod"]: r for r in records}
    assert by_pod["w0"]["cause"] == "user_error"
    assert (by_pod["leader"]["cause"], by_pod["leader"]["budget"]) == ("group_restart", "none")
    assert (by_pod["w1"]["cause"], by_pod["w1"]["budget"]) == ("group_restart", "none")
    assert "killed without" not in describe(by_pod["w1"]) and "no budget" in describe(by_pod["w1"])
    assert attempt_causes(evidence.records)[0]["pod"] == "w0"


def test_workers_stopped_once_the_success_policy_is_met_are_reported_as_such() -> None:
    evidence = Evidence()
    see(evidence, [pod("leader", "Running", role="leader"), pod("w0", "Running")], jobset())
    records = see(evidence, [pod("leader", "Succeeded", role="leader", exit_code=0)], jobset(completed=True))
    assert [(r["pod"], r["cause"], r["budget"], r["rule"]) for r in records] == [
        ("w0", "group_finished", "none", "jobset-finished")
    ]
    assert "success policy" in describe(records[0])


def test_an_attempt_whose_only_stops_the_jobset_made_is_explained_by_them() -> None:
    evidence = Evidence()
    see(evidence, [pod("w0", "Running")], jobset())
    see(evidence, [], jobset(1))
    assert attempt_causes(evidence.records)[0]["cause"] == "group_restart"
