"""``docker/k8s/rbac.yaml`` grants each Airflow identity exactly what the hooks ask the API server for.

The worker runs ``TrainingGroupHook`` (``TrainingGroupOperator``, ``TrainingGroupSensor``, the sweep operator),
``BatchJobHook`` (``BatchStageOperator``, ``CronJobOperator``) and ``RayJobHook`` (``RayJobOperator``); the triggerer
``AsyncTrainingGroupHook`` (``TrainingGroupTrigger``, ``SweepTrigger``), ``AsyncBatchJobHook`` (``BatchStageTrigger``)
and ``AsyncRayJobHook`` (``RayJobTrigger``). Each hook is driven
through every method of its protocol against the local cluster; the request log says which (API group, resource,
verb) each one sent. Those sets, and nothing more, must be what the manifest grants the worker's and the triggerer's
ServiceAccounts, so a new hook call without its permission (or a stale permission) fails here.
"""

from __future__ import annotations

import asyncio
import uuid

from airflow_elastic import Role, TrainingGroup
from airflow_elastic.hooks.protocol import (
    AsyncBatchJobHookProtocol,
    AsyncRayJobHookProtocol,
    AsyncTrainingGroupHookProtocol,
    BatchJobHookProtocol,
    RayJobHookProtocol,
    TrainingGroupHookProtocol,
)
from airflow_elastic.stages.cronjob import render_cronjob
from airflow_elastic.stages.job import render_job
from airflow_elastic.stages.spec import BatchStage
from airflow_elastic.training.render import render_jobset
from airflow_elastic.waiting.logcursor import LogRequest
from tests.support.rbac import (
    RBAC,
    SERVING_ROLE,
    Calls,
    drive,
    drive_async,
    granted,
    requested,
    sending_methods,
)

PLURALS = ("trainjobs", "pytorchjobs")
WATCH = (None, "", 1)  # label selector, resourceVersion, timeoutSeconds: each watch ends after 1 s


def pod_calls(namespace: str, pod: str) -> Calls:
    """Every hook's pods, events and logs (404 for the log is fine: the request was authorised), and the list-then-watch
    of pods the sync waiter waits with."""
    return {
        "list_pods": [(namespace,)],
        "list_pods_versioned": [(namespace,)],
        "watch_pods": [(namespace, *WATCH)],
        "list_events": [(namespace,)],
        "read_pod_log": [(namespace, pod)],
        "read_pod_log_chunk": [(namespace, pod, "trainer", LogRequest())],
    }


def pod_watch_calls(namespace: str, pod: str) -> Calls:
    """Every async hook's list-then-watch of pods and Warning events (the triggers' shared observer), and the
    followed log."""
    return {
        "list_pods_versioned": [(namespace,)],
        "list_events_versioned": [(namespace, "type=Warning")],
        "watch_pods": [(namespace, *WATCH)],
        "watch_events": [(namespace, "type=Warning", "", 1)],
        "stream_pod_log": [(namespace, pod, "trainer", LogRequest(follow=True))],
    }


def group_calls(namespace: str, node: str, *, sync: bool) -> Calls:
    """A training group's hook: the JobSet (created first, deleted last), the other backends' objects for both
    resources (a refused create, for want of a runtime, was still authorised), pods, nodes; the worker also runs
    the pre-flight reads (runtime, CRD), the triggerer keeps JobSets, TrainJobs and PyTorchJobs by list-then-watch."""
    name = f"rbac-{uuid.uuid4().hex[:6]}"
    body = render_jobset(
        TrainingGroup("rbac", [Role("leader", command=["python", "-c", "pass"])], image="x"), name=name
    )
    pod = f"{name}-leader-0-0-xxxxx"
    patch = {"metadata": {"labels": {"patched": "yes"}}}
    found: Calls = {
        "create_jobset": [(namespace, body)],
        "get_jobset": [(namespace, name)],
        "list_jobsets": [(namespace, "airflow-elastic.io/group=rbac")],
        "patch_jobset": [(namespace, name, patch)],
        **pod_calls(namespace, pod),
        "get_training_job": [(p, namespace, "rbac-x") for p in PLURALS],
        "patch_training_job": [(p, namespace, "rbac-x", patch) for p in PLURALS],
        "delete_training_job": [(p, namespace, "rbac-x") for p in PLURALS],
        "get_node": [(node,)],
    }
    if sync:
        kinds = {
            "trainjobs": ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
            "pytorchjobs": ("kubeflow.org/v1", "PyTorchJob"),
        }
        found["create_training_job"] = [
            (p, namespace, {"apiVersion": v, "kind": k, "metadata": {"name": "rbac-x"}, "spec": {}})
            for p, (v, k) in kinds.items()
        ]
        found["get_training_runtime"] = [
            (namespace, "torch-distributed", k) for k in ("TrainingRuntime", "ClusterTrainingRuntime")
        ]
        found["get_crd"] = [("trainjobs.trainer.kubeflow.org",)]
    else:
        found |= pod_watch_calls(namespace, pod)
        found["list_jobsets_versioned"] = [(namespace,)]
        found["watch_jobsets"] = [(namespace, *WATCH)]
        found |= {f"list_{p}_versioned": [(namespace,)] for p in PLURALS}
        found |= {f"watch_{p}": [(namespace, *WATCH)] for p in PLURALS}
    found["delete_jobset"] = [(namespace, name)]
    return found


def batch_calls(namespace: str, *, sync: bool) -> Calls:
    """A batch stage's hook: its Job (created first, deleted last) and pods; the worker also applies CronJobs
    (``CronJobOperator``), the triggerer keeps Jobs by list-then-watch (``BatchStageTrigger``)."""
    name = f"rbac-{uuid.uuid4().hex[:6]}-job"
    found: Calls = {
        "create_job": [(namespace, render_job(BatchStage("rbac", image="x", command=["true"]), name=name))],
        "get_job": [(namespace, name)],
        "list_jobs": [(namespace,)],
        **pod_calls(namespace, f"{name}-xxxxx"),
    }
    if sync:
        cron = render_cronjob(BatchStage("rbac-cron", image="x", command=["true"]), "@daily", namespace=namespace)
        found |= {
            "get_cronjob": [(namespace, "rbac-cron")],
            "create_cronjob": [(namespace, cron)],
            "patch_cronjob": [(namespace, "rbac-cron", {"spec": {"suspend": True}})],
            "delete_cronjob": [(namespace, "rbac-cron")],
        }
    else:
        found |= pod_watch_calls(namespace, f"{name}-xxxxx")
        found |= {"list_jobs_versioned": [(namespace,)], "watch_jobs": [(namespace, *WATCH)]}
    found["delete_job"] = [(namespace, name)]
    return found


def ray_calls(namespace: str, node: str, *, sync: bool) -> Calls:
    """A RayJob's hook: the RayJob (created first, deleted last), its pods and their nodes (a lost worker's evidence);
    the worker also reads the RayCluster, the triggerer keeps RayJobs by list-then-watch (``RayJobTrigger``)."""
    from airflow_elastic.ray import RayCluster, RayJob
    from airflow_elastic.ray.render import render_rayjob

    name = f"rbac-{uuid.uuid4().hex[:6]}"
    found: Calls = {
        "get_rayjob": [(namespace, name)],
        "list_rayjobs": [(namespace,)],
        "get_node": [(node,)],
        **pod_calls(namespace, f"{name}-xxxxx"),
    }
    if sync:
        body = render_rayjob(RayJob(RayCluster("rbac"), "python -c pass", suspend=True), name=name)
        found = {"create_rayjob": [(namespace, body)], **found}
        found["get_raycluster"] = [(namespace, f"{name}-xxxxx")]
    else:
        found |= pod_watch_calls(namespace, f"{name}-xxxxx")
        found |= {"list_rayjobs_versioned": [(namespace,)], "watch_rayjobs": [(namespace, *WATCH)]}
    found["delete_rayjob"] = [(namespace, name)]
    return found


def test_the_triggers_construct_the_hooks_driven_here():
    from airflow_elastic.triggers.batch_stage import BatchStageTrigger
    from airflow_elastic.triggers.ray import RayJobTrigger
    from airflow_elastic.triggers.sweep import SweepTrigger
    from airflow_elastic.triggers.training_group import TrainingGroupTrigger

    assert {t.hook_class for t in (TrainingGroupTrigger, SweepTrigger, BatchStageTrigger, RayJobTrigger)} == {
        "airflow_elastic.hooks.async_group.AsyncTrainingGroupHook",
        "airflow_elastic.hooks.async_batch.AsyncBatchJobHook",
        "airflow_elastic.hooks.async_ray.AsyncRayJobHook",
    }


def test_rbac_grants_each_identity_exactly_what_its_hooks_request(connection, namespace, local_cluster, core):
    from airflow_elastic.hooks.async_batch import AsyncBatchJobHook
    from airflow_elastic.hooks.async_group import AsyncTrainingGroupHook
    from airflow_elastic.hooks.async_ray import AsyncRayJobHook
    from airflow_elastic.hooks.batch import BatchJobHook
    from airflow_elastic.hooks.group import TrainingGroupHook
    from airflow_elastic.hooks.ray import RayJobHook

    node = core.list_node().items[0].metadata.name
    worker = {
        TrainingGroupHook: (TrainingGroupHookProtocol, group_calls(namespace, node, sync=True)),
        BatchJobHook: (BatchJobHookProtocol, batch_calls(namespace, sync=True)),
        RayJobHook: (RayJobHookProtocol, ray_calls(namespace, node, sync=True)),
    }
    triggerer = {
        AsyncTrainingGroupHook: (AsyncTrainingGroupHookProtocol, group_calls(namespace, node, sync=False)),
        AsyncBatchJobHook: (AsyncBatchJobHookProtocol, batch_calls(namespace, sync=False)),
        AsyncRayJobHook: (AsyncRayJobHookProtocol, ray_calls(namespace, node, sync=False)),
    }
    # Every method that talks to the API server is driven: a new one must be added here (and to the manifest).
    for hook_class, (protocol, calls) in (worker | triggerer).items():
        assert set(calls) == sending_methods(protocol), hook_class.__name__

    def drive_worker() -> None:
        for hook_class, (_, calls) in worker.items():
            drive(hook_class(connection), calls)

    async def drive_triggerer() -> None:
        for hook_class, (_, calls) in triggerer.items():
            await drive_async(hook_class(connection), calls)

    needed = {
        "airflow-worker": requested(local_cluster, drive_worker),
        "airflow-triggerer": requested(local_cluster, lambda: asyncio.run(drive_triggerer())),
    }
    # The log is what we think: each hook's requests are in it.
    assert ("namespaced", "jobset.x-k8s.io", "jobsets", "create") in needed["airflow-worker"]
    assert ("namespaced", "batch", "cronjobs", "delete") in needed["airflow-worker"]
    assert ("namespaced", "batch", "jobs", "watch") in needed["airflow-triggerer"]
    assert ("namespaced", "kubeflow.org", "pytorchjobs", "watch") in needed["airflow-triggerer"]
    assert ("namespaced", "ray.io", "rayjobs", "watch") in needed["airflow-triggerer"]
    grants = granted(RBAC, skip=SERVING_ROLE)  # the serving Role grants a documented table: test_rbac_serving.py
    for subject, wanted in needed.items():
        assert grants.get(f"airflow/{subject}") == wanted, (subject, sorted(wanted))
