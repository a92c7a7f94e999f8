"""Golden manifests for representative groups; each is also valid against the CRD, core/v1 and the webhook.

Regenerate after an intended change with ``UPDATE_GOLDEN=1 make test`` and review the diff.
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path

import pytest
import yaml

from airflow_elastic import (
    Checkpointing,
    Elastic,
    FailurePolicy,
    Placement,
    Resources,
    Role,
    SuccessPolicy,
    TrainingGroup,
)
from airflow_elastic.kube import names
from airflow_elastic.kube.schema import schema_errors
from airflow_elastic.training.render import render_jobset
from tests.support.jobset_webhook import webhook_errors
from tests.support.paths import ROOT

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
EXAMPLES = runpy.run_path(str(ROOT / "dags" / "example_groups.py"))


def torchrun_group() -> TrainingGroup:
    """Multi-process pods under torchrun, exclusive nodes, queued in Kueue, elastic workers."""
    return TrainingGroup(
        "resnet",
        [
            Role(
                "node",
                replicas=4,
                command=["torchrun"],
                args=["train.py"],
                processes_per_pod=8,
                resources=Resources(cpu="32", memory="200Gi", gpu=8),
            ),
        ],
        image="registry.example.com/resnet:2",
        placement=Placement(exclusive_topology="kubernetes.io/hostname", queue="research", priority_class="batch-high"),
        elastic=Elastic(2, 4),
        checkpoint=Checkpointing("/mnt/ckpt/resnet", keep=2),
        coordinator_port=23456,
    )


def any_success_group() -> TrainingGroup:
    """Launcher/worker with 'any worker finishes' success, AMD GPUs on AKS spot, per-role overrides."""
    return TrainingGroup(
        "eval-sweep",
        [
            Role(
                "launcher",
                command=["python", "launch.py"],
                resources=Resources(cpu="1", memory="2Gi"),
                pod_overrides={"spec": {"serviceAccountName": "launcher"}},
            ),
            Role(
                "worker",
                replicas=3,
                command=["python", "work.py"],
                resources=Resources(cpu="4", memory="16Gi", gpu=1, gpu_vendor="amd"),
                placement=Placement(spot=True, spot_platform="aks"),
                env={"SHARD_COUNT": "3"},
            ),
        ],
        image="registry.example.com/eval:1",
        success=SuccessPolicy(mode="any", roles=("worker",)),
        failure=FailurePolicy(max_failures=1, max_preemptions=3),
        pod_overrides={
            "metadata": {"annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}},
            "spec": {"securityContext": {"runAsNonRoot": True, "fsGroup": 1000}},
        },
    )


GROUPS = {
    "llm-finetune": lambda: EXAMPLES["llm_finetune"],
    "cpu-smoke": lambda: EXAMPLES["cpu_smoke"],
    "resnet-torchrun": torchrun_group,
    "eval-any-success": any_success_group,
}


@pytest.mark.parametrize("key", GROUPS)
def test_golden(key: str):
    group = GROUPS[key]()
    manifest = render_jobset(
        group,
        name=names.run_name(group.name, "golden"),
        namespace="ml",
        labels={"airflow-elastic.io/dag-id": "example"},
        ttl_seconds_after_finished=3600,
    )
    path = GOLDEN / f"{key}.yaml"
    text = yaml.safe_dump(manifest, sort_keys=False)
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing {path}; run with UPDATE_GOLDEN=1"
    assert yaml.safe_load(path.read_text()) == manifest, f"{path} differs; review and UPDATE_GOLDEN=1"


@pytest.mark.parametrize("key", GROUPS)
def test_golden_manifests_are_valid(key: str):
    manifest = yaml.safe_load((GOLDEN / f"{key}.yaml").read_text())
    assert schema_errors(manifest) == []
    assert webhook_errors(manifest) == []
