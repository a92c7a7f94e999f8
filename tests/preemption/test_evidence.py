"""Evidence over pod lists: stops the JobSet makes itself never explain an attempt (docs/preemption.md §1.4)."""

from __future__ import annotations

from typing import Any

from airflow_elastic.preemption.evidence import Evidence, attempt_causes, describe, node_names

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


# A pod evicted from a node that stays lost stays Terminating (docs/preemption.md §2.1): a stop once replaced.

INDEX = "batch.kubernetes.io/job-completion-index"
SPOT = {"airflow-elastic.io/capacity-type": "spot"}
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-03-01T10:04:00Z"}
LOST = {
    "metadata": {"name": "n1", "labels": SPOT},
    "spec": {"taints": [UNREACHABLE]},
    "status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]},
}


def indexed(name: str, phase: str = "Running", *, index: int = 1, evicted: str | None = None, **kw: Any) -> dict:
    """Pod ``index`` of the worker Job; ``evicted``: being deleted, with that ``DisruptionTarget`` reason ("": none)."""
    found = pod(name, phase, **kw)
    found["metadata"]["annotations"] = {INDEX: str(index)}
    found["spec"]["nodeSelector"] = dict(SPOT)
    if evicted is not None:
        found["metadata"]["deletionTimestamp"] = "2026-03-01T10:05:00Z"
    if evicted:
        found["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": evicted}]
    return found


def looks(evidence: Evidence, pods: list[dict[str, Any]], nodes: dict[str, Any]) -> list[dict[str, Any]]:
    records = evidence.record(evidence.observe(pods), nodes, jobset=jobset())
    evidence.absorb(pods)
    return records


def test_a_stranded_pod_with_a_replacement_is_a_stop_with_the_classifiers_cause() -> None:
    evidence = Evidence()
    assert looks(evidence, [indexed("w1")], NODES) == []
    stranded = indexed("w1", evicted="DeletionByTaintManager")
    # Replaced, but still Terminating: nodes are asked for it, and the taint manager's eviction decides.
    assert node_names(evidence.observe([stranded, indexed("w1-new")])) == {"n1"}
    evidence = Evidence()
    (record,) = looks(evidence, [stranded, indexed("w1-new")], {"n1": LOST})
    assert (record["cause"], record["budget"], record["rule"]) == ("node_loss", "preemption", "taint-manager")
    assert record["replaced_by"] == "w1-new" and "n1, which is Ready=Unknown" in record["evidence"][-1]
    assert [r["cause"] for r in evidence.absorbed] == ["node_loss"]


def test_a_stranded_pod_on_a_lost_node_needs_no_disruption_target() -> None:
    evidence = Evidence()
    deleted = indexed("w1", evicted="")  # a raw delete the lost kubelet never confirms
    assert looks(evidence, [deleted, indexed("w1-new")], {}) == []  # the node could not be read: not yet
    (record,) = looks(evidence, [deleted, indexed("w1-new")], {"n1": LOST})
    assert (record["cause"], record["rule"]) == ("node_loss", "unreachable-node")
    assert looks(evidence, [indexed("w1-new")], {"n1": LOST}) == []  # gone at last: already recorded
    (gone,) = looks(Evidence(), [deleted, indexed("w1-new")], {"n1": None})
    assert (gone["cause"], gone["rule"]) == ("spot_reclaim", "spot-node-gone")  # the rules' order, for a spot node
    assert [r["cause"] for r in evidence.absorbed] == ["node_loss"]


def test_a_stranded_pod_is_recorded_once_and_its_later_end_never_again() -> None:
    evidence = Evidence()
    stranded = indexed("w1", evicted="DeletionByTaintManager")
    assert len(looks(evidence, [stranded, indexed("w1-new")], {"n1": LOST})) == 1
    assert looks(evidence, [stranded, indexed("w1-new")], {"n1": LOST}) == []
    ended = indexed("w1", "Failed", evicted="DeletionByTaintManager", exit_code=137)
    assert looks(evidence, [ended, indexed("w1-new")], {"n1": LOST}) == []
    assert looks(evidence, [indexed("w1-new")], {"n1": LOST}) == []
    assert len(evidence.records) == len(evidence.absorbed) == 1


def test_a_stranded_pod_whose_replacement_finds_no_room_is_recorded_and_absorbed_once_it_runs() -> None:
    evidence = Evidence()
    stranded = indexed("w1", evicted="DeletionByTaintManager")
    (record,) = looks(evidence, [stranded, indexed("w1-new", "Pending")], {"n1": LOST})
    assert (record["cause"], record["budget"]) == ("node_loss", "preemption") and "absorbed" not in record
    assert evidence.absorbed == []  # the group is short-handed until the replacement runs
    assert looks(evidence, [stranded, indexed("w1-new", "Pending")], {"n1": LOST}) == []  # recorded once
    assert looks(evidence, [stranded, indexed("w1-new")], {"n1": LOST}) == []
    assert record["absorbed"] is True and [r["replaced_by"] for r in evidence.absorbed] == ["w1-new"]


def test_a_terminating_pod_is_no_stop_without_a_replacement_evidence_or_a_preemption() -> None:
    healthy = {"n1": {"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}}
    stranded = indexed("w1", evicted="DeletionByTaintManager")
    pressure = indexed("w1", evicted="TerminationByKubelet")  # evicted for using more memory than it requested
    pressure["status"] |= {
        "reason": "Evicted",
        "message": "The node was low on resource: memory. Container trainer was using 3Gi, request is 1Gi.",
    }
    cases = {
        "a pod of another index is no replacement": ([stranded, indexed("w0", index=0)], LOST, 0),
        "a delete under way on a healthy node": ([indexed("w1", evicted=""), indexed("w1-new")], healthy["n1"], 0),
        # The group's restart deletes attempt 0's pods; attempt 1's run in other slots.
        "a group restart": ([stranded, indexed("w1-next", attempt=1)], LOST, 1),
        # Charged to the failure budget: judged when it ends, as any other stop.
        "no preemption": ([pressure, indexed("w1-new")], healthy["n1"], 0),
    }
    for case, (pods, node, restarts) in cases.items():
        evidence = Evidence()
        assert evidence.record(evidence.observe(pods), {"n1": node}, jobset=jobset(restarts)) == [], case
        assert evidence.absorb(pods) == [] and evidence.done == set(), case


def disrupted(p: dict[str, Any], reason: str = "PreemptionByScheduler") -> dict[str, Any]:
    p["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": reason}]
    return p


def test_a_pod_deleted_between_two_lists_is_judged_by_its_final_state_once() -> None:
    evidence = Evidence()
    see(evidence, [pod("leader", "Running", role="leader"), pod("w0", "Running")], jobset())
    # w0 was preempted, failed and was deleted with its attempt before the next list: only the watch's DELETED
    # object (its final state) says why; the previous list's copy says it was running.
    final = disrupted(pod("w0", "Failed", exit_code=143))
    after = [pod("leader-1", "Running", role="leader", attempt=1), pod("w0-1", "Running", attempt=1)]
    records = evidence.record(evidence.observe(after, deleted=[final]), NODES, jobset=jobset(1))
    by_pod = {r["pod"]: r for r in records}
    assert (by_pod["w0"]["cause"], by_pod["w0"]["budget"]) == ("scheduler_preemption", "preemption")
    assert by_pod["leader"]["cause"] == "group_restart"
    # A cache repeats its deleted objects: never judged twice.
    assert evidence.observe(after, deleted=[final]) == []


def test_a_pod_created_and_deleted_between_two_lists_is_not_missed() -> None:
    evidence = Evidence()
    see(evidence, [pod("w0", "Running")], jobset())
    brief = disrupted(pod("w0-1", "Failed", attempt=1, exit_code=143))
    records = evidence.record(
        evidence.observe([pod("w0", "Running"), pod("w0-2", "Running", attempt=2)], deleted=[brief]), NODES
    )
    assert [(r["pod"], r["attempt"], r["budget"]) for r in records] == [("w0-1", 1, "preemption")]
