"""Rendering a fault-tolerant group: the lighthouse, one child Job per replica group, torchft's env, golden files.

Regenerate the golden files after an intended change with ``UPDATE_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_elastic import Checkpointing, FailurePolicy, FaultTolerance, Placement, Resources, Role, TrainingGroup
from airflow_elastic.kube import names
from airflow_elastic.kube.schema import schema_errors
from airflow_elastic.training.render import render_jobset
from tests.support.jobset_webhook import webhook_errors

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"


def ddp_group(**ft: Any) -> TrainingGroup:
    """Three replica groups of one pod on GKE spot, the lighthouse on on-demand (the issue's example)."""
    return TrainingGroup(
        "ft-ddp",
        [Role("trainer", command=["python", "train_ddp.py"], resources=Resources(cpu="2", memory="4Gi"))],
        image="registry.example.com/ddp:1",
        placement=Placement(spot=True, spot_platform="gke"),
        failure=FailurePolicy(max_failures=2, max_preemptions=20),
        checkpoint=Checkpointing("gs://bucket/ft-ddp"),
        fault_tolerance=FaultTolerance(3, **ft),
    )


def hsdp_group() -> TrainingGroup:
    """Replica groups of two pods under torchrun, restarted per Job where JobSet has the RestartJob gate."""
    return TrainingGroup(
        "ft-hsdp",
        [Role("shard", replicas=2, command=["torchrun"], args=["train.py"], processes_per_pod=4)],
        image="registry.example.com/hsdp:1",
        fault_tolerance=FaultTolerance(
            4,
            min_replica_groups=2,
            join_timeout_ms=5000,
            heartbeat_timeout_ms=2000,
            restart_job=True,
            lighthouse_placement=Placement(node_selector={"pool": "system"}),
            lighthouse_resources=Resources(cpu="250m", memory="256Mi"),
            lighthouse_image="registry.example.com/torchft:0.2.0",
        ),
    )


GROUPS = {"ft-ddp": (ddp_group, False), "ft-hsdp": (hsdp_group, True)}


def render(group: TrainingGroup) -> dict[str, Any]:
    return render_jobset(group, name=names.run_name(group.name, "golden"), namespace="ml")


def env_of(rjob: dict[str, Any]) -> dict[str, Any]:
    container = rjob["template"]["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def rjob(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in manifest["spec"]["replicatedJobs"] if r["name"] == name)


@pytest.mark.parametrize("key", GROUPS)
def test_golden(key: str):
    build, _ = GROUPS[key]
    manifest = render(build())
    path = GOLDEN / f"{key}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    assert path.exists(), f"missing {path}; run with UPDATE_GOLDEN=1"
    assert yaml.safe_load(path.read_text()) == manifest, f"{path} differs; review and UPDATE_GOLDEN=1"


@pytest.mark.parametrize("key", GROUPS)
def test_golden_manifests_are_valid(key: str):
    _, gate = GROUPS[key]
    manifest = yaml.safe_load((GOLDEN / f"{key}.yaml").read_text())
    assert schema_errors(manifest) == []
    assert webhook_errors(manifest, restart_job_gate=gate) == []


def test_a_lighthouse_on_demand_and_one_child_job_per_replica_group():
    manifest = render(ddp_group())
    assert [r["name"] for r in manifest["spec"]["replicatedJobs"]] == ["lighthouse", "trainer"]
    trainer, lighthouse = rjob(manifest, "trainer"), rjob(manifest, "lighthouse")
    assert trainer["replicas"] == 3
    assert trainer["template"]["spec"]["completions"] == trainer["template"]["spec"]["parallelism"] == 1
    assert lighthouse["replicas"] == 1
    command = lighthouse["template"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[0] == "torchft_lighthouse"
    assert {"--min_replicas=1", "--quorum_tick_ms=100", "--join_timeout_ms=60000"} <= set(command)
    lighthouse_pod = lighthouse["template"]["spec"]["template"]["spec"]
    assert "nodeSelector" not in lighthouse_pod  # on-demand, while the replica groups are on spot
    assert trainer["template"]["spec"]["template"]["spec"]["nodeSelector"] == {"cloud.google.com/gke-spot": "true"}
    assert manifest["spec"]["successPolicy"] == {"operator": "Any", "targetReplicatedJobs": ["trainer"]}


def test_each_pod_gets_torchfts_env_and_the_contract_within_its_replica_group():
    manifest = render(ddp_group())
    jobset = manifest["metadata"]["name"]
    env = env_of(rjob(manifest, "trainer"))
    assert env["TORCHFT_LIGHTHOUSE"] == f"http://{jobset}-lighthouse-0-0.{jobset}:29510"
    assert env["REPLICA_GROUP_ID"] == {"fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/job-index']"}}
    assert env["NUM_REPLICA_GROUPS"] == "3"
    # MASTER_ADDR is the replica group's own pod 0, expanded by Kubernetes from REPLICA_GROUP_ID, defined first.
    assert env["MASTER_ADDR"] == f"{jobset}-trainer-$(REPLICA_GROUP_ID)-0.{jobset}"
    assert list(env).index("REPLICA_GROUP_ID") < list(env).index("MASTER_ADDR")
    assert env["WORLD_SIZE"] == env["AE_WORLD_SIZE"] == "1"
    completion = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert env["RANK"] == env["AE_RANK"] == completion
    assert env["TORCHFT_MANAGER_PORT"] == "29511"
    assert env["AE_CHECKPOINT_URI"] == "gs://bucket/ft-ddp"
    pod = rjob(manifest, "trainer")["template"]["spec"]["template"]["spec"]
    assert pod["dnsConfig"] == {"searches": [f"{jobset}.ml.svc.cluster.local"]}  # the managers' bare hostnames


def test_torchrun_replica_groups_count_their_own_pods():
    env = env_of(rjob(render(hsdp_group()), "shard"))
    assert (env["NNODES"], env["NPROC_PER_NODE"], env["WORLD_SIZE"]) == ("2", "4", "8")
    assert "RANK" not in env


def test_a_lost_single_pod_replica_group_is_replaced_by_its_job():
    job = rjob(render(ddp_group()), "trainer")["template"]["spec"]
    assert job["podFailurePolicy"]["rules"][0]["action"] == "Ignore"
    assert job["backoffLimit"] == 2  # a genuine failure: the Job retries the pod, charged to max_failures
    assert job["podReplacementPolicy"] == "Failed"
    rules = render(ddp_group())["spec"]["failurePolicy"]["rules"]
    assert [r["action"] for r in rules] == ["RestartJobSet"]


def test_restart_job_restarts_only_the_replica_group():
    manifest = render(hsdp_group())
    job = rjob(manifest, "shard")["template"]["spec"]
    assert (job["backoffLimit"], job["podFailurePolicy"]["rules"][0]["action"]) == (0, "FailJob")
    rules = manifest["spec"]["failurePolicy"]["rules"]
    assert [(r["action"], r.get("targetReplicatedJobs")) for r in rules] == [
        ("RestartJobAndIgnoreMaxRestarts", ["shard"]),
        ("RestartJob", ["shard"]),
        ("RestartJobSetAndIgnoreMaxRestarts", None),
        ("RestartJobSet", None),
    ]
    assert webhook_errors(manifest)  # refused where the gate is off


def test_without_the_gate_a_multi_pod_replica_group_restarts_the_set():
    group = hsdp_group().with_changes(fault_tolerance=FaultTolerance(4, restart_job=False))
    rules = render(group)["spec"]["failurePolicy"]["rules"]
    assert [r["action"] for r in rules] == ["RestartJobSetAndIgnoreMaxRestarts", "RestartJobSet"]
    assert webhook_errors(render(group)) == []


def test_the_cli_renders_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from airflow_elastic.cli import main

    dag = tmp_path / "dag.py"
    dag.write_text(
        "from airflow_elastic import FaultTolerance, Role, TrainingGroup\n"
        "g = TrainingGroup('ft', [Role('trainer', command=['python', 't.py'])], image='i:1',"
        " fault_tolerance=FaultTolerance(2))\n"
    )
    assert main(["render", str(dag)]) in (0, None)
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [r["name"] for r in docs[0]["spec"]["replicatedJobs"]] == ["lighthouse", "trainer"]
