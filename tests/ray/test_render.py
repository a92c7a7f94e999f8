"""A Ray job renders as the KubeRay v1.7 RayJob its upstream samples and types describe."""

from __future__ import annotations

import json

import pytest

from airflow_elastic.kube.schema import rayjob_schema_errors
from airflow_elastic.ray import RayCluster, RayHead, RayJob, SpecError, WorkerGroup
from airflow_elastic.ray.render import render_rayjob
from airflow_elastic.training.spec import Placement, Resources

CLUSTER = RayCluster(
    "tune",
    head=RayHead(resources=Resources(cpu="2", memory="4Gi"), ray_start_params={"num-cpus": 0}),
    worker_groups=[
        WorkerGroup(
            "spot-cpu",
            replicas=2,
            min_replicas=1,
            max_replicas=4,
            resources=Resources(cpu="4", memory="8Gi", gpu=1),
            placement=Placement(spot=True, spot_platform="gke"),
        )
    ],
    env={"DATA": "/data"},
    runtime_env={"pip": ["optuna==4.2"]},
)
JOB = RayJob(
    CLUSTER, "python tune.py --trials 20", runtime_env={"env_vars": {"SEED": "1"}}, active_deadline_seconds=3600
)
IDENTITY = {"airflow-elastic.io/dag-id": "nightly", "airflow-elastic.io/task-id": "sweep"}
LABELS = {"app.kubernetes.io/managed-by": "airflow-elastic", "airflow-elastic.io/ray-cluster": "tune", **IDENTITY}
NODE_LOSS = [
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
]


def test_a_head_and_a_spot_worker_group_render_as_kuberays_rayjob():
    manifest = render_rayjob(JOB, name="tune-abc123", namespace="ml", labels=IDENTITY)
    assert manifest == {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "tune-abc123", "namespace": "ml", "labels": LABELS},
        "spec": {
            "entrypoint": "python tune.py --trials 20",
            "runtimeEnvYAML": json.dumps({"env_vars": {"SEED": "1"}, "pip": ["optuna==4.2"]}, indent=2),
            "submissionMode": "K8sJobMode",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 0,
            "activeDeadlineSeconds": 3600,
            "suspend": False,
            "rayClusterSpec": {
                "rayVersion": "2.60.0",
                "headGroupSpec": {
                    "rayStartParams": {"dashboard-host": "0.0.0.0", "num-cpus": "0"},
                    "template": {
                        "metadata": {"labels": LABELS},
                        "spec": {
                            "containers": [
                                {
                                    "name": "ray-head",
                                    "image": "rayproject/ray:2.60.0",
                                    "env": [{"name": "DATA", "value": "/data"}],
                                    "resources": {
                                        "requests": {"cpu": "2", "memory": "4Gi"},
                                        "limits": {"memory": "4Gi"},
                                    },
                                    "terminationMessagePolicy": "FallbackToLogsOnError",
                                    "ports": [
                                        {"containerPort": 6379, "name": "gcs-server"},
                                        {"containerPort": 8265, "name": "dashboard"},
                                        {"containerPort": 10001, "name": "client"},
                                    ],
                                }
                            ],
                            "tolerations": NODE_LOSS,
                        },
                    },
                },
                "workerGroupSpecs": [
                    {
                        "groupName": "spot-cpu",
                        "replicas": 2,
                        "minReplicas": 1,
                        "maxReplicas": 4,
                        "rayStartParams": {},
                        "template": {
                            "metadata": {"labels": LABELS},
                            "spec": {
                                "containers": [
                                    {
                                        "name": "ray-worker",
                                        "image": "rayproject/ray:2.60.0",
                                        "env": [{"name": "DATA", "value": "/data"}],
                                        "resources": {
                                            "requests": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"},
                                            "limits": {"memory": "8Gi", "nvidia.com/gpu": "1"},
                                        },
                                        "terminationMessagePolicy": "FallbackToLogsOnError",
                                    }
                                ],
                                "nodeSelector": {"cloud.google.com/gke-spot": "true"},
                                "tolerations": [
                                    {
                                        "key": "cloud.google.com/gke-spot",
                                        "operator": "Equal",
                                        "value": "true",
                                        "effect": "NoSchedule",
                                    },
                                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                                    *NODE_LOSS,
                                ],
                            },
                        },
                    }
                ],
            },
            "submitterPodTemplate": {
                "metadata": {"labels": LABELS},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "ray-job-submitter",
                            "image": "rayproject/ray:2.60.0",
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                            "resources": {
                                "limits": {"cpu": "1", "memory": "1Gi"},
                                "requests": {"cpu": "500m", "memory": "200Mi"},
                            },
                        }
                    ],
                },
            },
        },
    }
    assert rayjob_schema_errors(manifest) == []


def test_kueue_http_mode_and_a_sized_submitter():
    queued = render_rayjob(RayJob(CLUSTER, "python tune.py", queue="gpu-queue", submitter=Resources(cpu="250m")))
    assert queued["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    assert queued["spec"]["suspend"] is True
    submitter = queued["spec"]["submitterPodTemplate"]["spec"]["containers"][0]
    assert submitter["resources"] == {"requests": {"cpu": "250m"}}
    http = render_rayjob(RayJob(CLUSTER, "python tune.py", submission_mode="HTTPMode"))
    assert http["spec"]["submissionMode"] == "HTTPMode" and "submitterPodTemplate" not in http["spec"]
    assert http["metadata"]["name"] == "tune"
    alone = render_rayjob(RayJob(RayCluster("solo", image="me/ray:1"), "echo hi"))
    assert "workerGroupSpecs" not in alone["spec"]["rayClusterSpec"] and "runtimeEnvYAML" not in alone["spec"]
    assert alone["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] == "me/ray:1"
    for manifest in (queued, http, alone):
        assert rayjob_schema_errors(manifest) == []


def test_the_head_keeps_a_dashboard_host_it_is_given():
    head = RayHead(ray_start_params={"dashboard-host": "127.0.0.1"})
    manifest = render_rayjob(RayJob(RayCluster("c", head=head), "true"))
    assert manifest["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"] == {"dashboard-host": "127.0.0.1"}


def test_the_render_call_is_checked():
    with pytest.raises(SpecError) as err:
        render_rayjob(
            JOB, name="x" * 48, namespace="Bad", labels={"ray.io/cluster": "x", "app.kubernetes.io/managed-by": "me"}
        )
    assert set(dict(err.value.problems)) == {
        "name",
        "namespace",
        "labels['ray.io/cluster']",
        "labels['app.kubernetes.io/managed-by']",
    }
    render_rayjob(JOB, name="x" * 47)


def test_the_schema_check_finds_a_wrong_field():
    manifest = render_rayjob(JOB)
    manifest["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = "two"
    assert rayjob_schema_errors(manifest) != []
