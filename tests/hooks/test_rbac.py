"""``docker/k8s/rbac.yaml`` grants each Airflow identity exactly what the hooks ask the API server for.

The worker runs ``JobSetHook`` (operator, sensor) and the triggerer ``AsyncJobSetHook`` (the trigger). Each hook is
driven through every method of its protocol against the local cluster; the request log says which (API group,
resource, verb) each one sent. Those sets, and nothing more, must be what the manifest grants the worker's and the
triggerer's ServiceAccounts, so a new hook call without its permission (or a stale permission) fails here.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

from airflow_elastic import Role, TrainingGroup
from airflow_elastic.hooks import AsyncJobSetHook, JobSetHookProtocol, KubernetesApiError
from airflow_elastic.hooks.protocol import (
    AsyncJobHookProtocol,
    AsyncTrainingJobHookProtocol,
    CronJobHookProtocol,
    JobHookProtocol,
    TrainingJobHookProtocol,
    WatchingHookProtocol,
)
from airflow_elastic.stages.job import render_job
from airflow_elastic.stages.spec import BatchStage
from airflow_elastic.training.render import render_jobset
from airflow_elastic.waiting.logcursor import LogRequest
from tests.support.rbac import RBAC, SERVING_ROLE, granted, protocol_methods, requested

#: The ServiceAccounts (namespace ``airflow``) the Airflow components run as, and the hook each one uses.
SUBJECTS = {"airflow-worker": "sync", "airflow-triggerer": "async"}
#: Hook methods that send no request.
LOCAL_METHODS = {"get_namespace", "get_connection_extras"}


def calls(namespace: str, node: str) -> dict[str, tuple[Any, ...]]:
    """Arguments for every request-sending hook method, in an order that works (create first, delete last)."""
    name = f"rbac-{uuid.uuid4().hex[:6]}"
    body = render_jobset(
        TrainingGroup("rbac", [Role("leader", command=["python", "-c", "pass"])], image="x"), name=name
    )
    return {
        "create_jobset": (namespace, body),
        "get_jobset": (namespace, name),
        "list_jobsets": (namespace, "airflow-elastic.io/group=rbac"),
        "patch_jobset": (namespace, name, {"metadata": {"labels": {"patched": "yes"}}}),
        "list_pods": (namespace,),
        "list_events": (namespace,),
        "list_jobs": (namespace,),
        "create_job": (namespace, render_job(BatchStage("rbac", image="x", command=["true"]), name=f"{name}-job")),
        "get_job": (namespace, f"{name}-job"),
        "delete_job": (namespace, f"{name}-job"),
        "get_node": (node,),
        "read_pod_log": (namespace, f"{name}-leader-0-0-xxxxx"),  # 404 is fine: the request was authorised
        "read_pod_log_chunk": (namespace, f"{name}-leader-0-0-xxxxx", "trainer", LogRequest()),
        "delete_jobset": (namespace, name),
    }


def cronjob_calls(namespace: str) -> dict[str, tuple[Any, ...]]:
    """``CronJobOperator``'s calls (the worker's hook only)."""
    from airflow_elastic.stages.cronjob import render_cronjob

    body = render_cronjob(BatchStage("rbac-cron", image="x", command=["true"]), "@daily", namespace=namespace)
    return {
        "get_cronjob": (namespace, "rbac-cron"),
        "create_cronjob": (namespace, body),
        "patch_cronjob": (namespace, "rbac-cron", {"spec": {"suspend": True}}),
    }


def training_job_calls(namespace: str, *, sync: bool) -> dict[str, list[tuple[Any, ...]]]:
    """The other backends' calls (``backend="trainjob" | "pytorchjob"``), for both resources; the worker also creates
    and runs the pre-flight reads (runtime, CRD). A refused create (no runtime) was still authorised."""
    plurals = ("trainjobs", "pytorchjobs")
    found = {
        "get_training_job": [(p, namespace, "rbac-x") for p in plurals],
        "patch_training_job": [(p, namespace, "rbac-x", {"metadata": {"labels": {"patched": "yes"}}}) for p in plurals],
        "delete_training_job": [(p, namespace, "rbac-x") for p in plurals],
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
        found |= {f"list_{p}_versioned": [(namespace,)] for p in plurals}
        found |= {f"watch_{p}": [(namespace, None, "", 1)] for p in plurals}
    return found


def watch_calls(namespace: str) -> dict[str, tuple[Any, ...]]:
    """The async hook's streams: list-then-watch (the triggers' shared observer, of JobSets or Jobs; each watch ends
    after 1 s), and the followed log (404 is fine: the request was authorised)."""
    return {
        "list_jobsets_versioned": (namespace,),
        "list_pods_versioned": (namespace,),
        "list_events_versioned": (namespace, "type=Warning"),
        "watch_jobsets": (namespace, None, "", 1),
        "watch_pods": (namespace, None, "", 1),
        "watch_events": (namespace, "type=Warning", "", 1),
        "list_jobs_versioned": (namespace,),
        "watch_jobs": (namespace, None, "", 1),
        "stream_pod_log": (namespace, "rbac-leader-0-0-xxxxx", "trainer", LogRequest(follow=True)),
    }


def test_rbac_grants_each_identity_exactly_what_its_hook_requests(hook, connection, namespace, local_cluster, core):
    node = core.list_node().items[0].metadata.name
    single = {**calls(namespace, node), **cronjob_calls(namespace)}
    sync_calls = {**{k: [v] for k, v in single.items()}, **training_job_calls(namespace, sync=True)}
    single = {**calls(namespace, node), **watch_calls(namespace)}
    async_calls = {**{k: [v] for k, v in single.items()}, **training_job_calls(namespace, sync=False)}
    # Every method that talks to the API server is driven: a new one must be added here (and to the manifest).
    sync_protocols = (JobSetHookProtocol, JobHookProtocol, CronJobHookProtocol, TrainingJobHookProtocol)
    assert set(sync_calls) == set().union(*map(protocol_methods, sync_protocols)) - LOCAL_METHODS
    async_protocols = (WatchingHookProtocol, AsyncJobHookProtocol, AsyncTrainingJobHookProtocol)
    assert set(async_calls) == set().union(*map(protocol_methods, async_protocols)) - LOCAL_METHODS

    def drive_sync() -> None:
        for method, each in sync_calls.items():
            for args in each:
                with contextlib.suppress(KubernetesApiError):  # read_pod_log's 404: the request was made, authorised
                    getattr(hook, method)(*args)

    async def drive_async() -> None:
        async_hook = AsyncJobSetHook(connection)
        for method, each in async_calls.items():
            for args in each:
                with contextlib.suppress(KubernetesApiError):
                    result = getattr(async_hook, method)(*args)
                    if hasattr(result, "__aiter__"):  # a stream (a watch): read to its end
                        _ = [item async for item in result]
                    else:
                        await result

    needed = {
        "sync": requested(local_cluster, drive_sync),
        "async": requested(local_cluster, lambda: asyncio.run(drive_async())),
    }
    assert ("namespaced", "jobset.x-k8s.io", "jobsets", "create") in needed["sync"]  # the log is what we think
    grants = granted(RBAC, skip=SERVING_ROLE)  # the serving Role grants a documented table: test_rbac_serving.py
    for subject, hook_kind in SUBJECTS.items():
        assert grants.get(f"airflow/{subject}") == needed[hook_kind], (subject, sorted(needed[hook_kind]))
