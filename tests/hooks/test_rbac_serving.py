"""``docker/k8s/rbac.yaml``'s serving Role: exactly the InferenceService and Deployment rows of the KServe client
table (``docs/serving.md``) plus ``services/proxy``, and enough for every request the serving hooks send.

Each serving hook method is driven against the local cluster (refusals such as a 404 or a 503 were still authorised);
the request log says which (API group, resource, verb) it sent, and each must be granted to the identity that uses
that hook (the worker: ``InferenceServiceHook``; the triggerer: ``AsyncInferenceServiceHook``).
"""

from __future__ import annotations

import asyncio
import contextlib

import yaml

from airflow_elastic.hooks.errors import KubernetesApiError
from airflow_elastic.hooks.protocol import AsyncInferenceServiceHookProtocol, InferenceServiceHookProtocol
from airflow_elastic.hooks.retry import RetryPolicy
from airflow_elastic.serving import inference_service as serving
from tests.support.paths import ROOT
from tests.support.rbac import RBAC, SERVING_ROLE, granted, protocol_methods, requested

#: The serving Role's rules as documented: (API group, resource, verbs).
TABLE = {
    ("serving.kserve.io", "inferenceservices"): {"create", "get", "list", "watch", "patch", "update", "delete"},
    ("apps", "deployments"): {"get", "list", "watch"},
    ("", "services/proxy"): {"get", "create"},
}


def test_the_serving_role_is_the_documented_table():
    (role,) = [
        d
        for d in yaml.safe_load_all(RBAC.read_text())
        if d and d["kind"] == "Role" and d["metadata"]["name"] in SERVING_ROLE
    ]
    rules = {(g, r): set(rule["verbs"]) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert rules == TABLE
    doc = (ROOT / "docs" / "serving.md").read_text().split("\n## RBAC", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in doc.splitlines() if line.startswith("| `")]
    documented = {
        (group.split("`")[1].strip('"'), group.split("` ")[1]): set(verbs.replace(" ", "").split(","))
        for group, verbs, _ in rows
    }
    assert documented == TABLE


def test_every_serving_hook_request_is_granted_to_the_identity_sending_it(connection, namespace, local_cluster):
    from airflow_elastic.hooks.async_inference_service import AsyncInferenceServiceHook
    from airflow_elastic.hooks.inference_service import InferenceServiceHook

    body = serving.render("rbac", namespace, "file:///nowhere", serving.Predictor(model_format="pytorch"))
    sync_calls = {
        "get_inference_service": (namespace, "rbac"),
        "create_inference_service": (namespace, body),
        "patch_inference_service": (namespace, "rbac", {"spec": {"predictor": {"minReplicas": 1}}}),
        "get_deployment": (namespace, "rbac-predictor"),
        "list_pods": (namespace, "app=isvc.rbac-predictor"),
        "read_pod_log": (namespace, "rbac-predictor-x", "kserve-container"),
    }
    serving_methods = protocol_methods(InferenceServiceHookProtocol) | {"list_pods", "read_pod_log"}
    assert set(sync_calls) | {"call_service"} == serving_methods  # a new serving request must be driven here
    sync_hook = InferenceServiceHook(connection, retry=RetryPolicy(attempts=1))  # the proxy's 503s: asked once

    def drive_sync() -> None:
        for method, args in sync_calls.items():
            with contextlib.suppress(KubernetesApiError):
                getattr(sync_hook, method)(*args)
        for body_ in (None, {"instances": [[0.0]]}):  # readiness (GET), then the smoke request (POST)
            with contextlib.suppress(KubernetesApiError):
                sync_hook.call_service(namespace, "rbac-predictor", "v1/models/rbac", body_)

    async def drive_async() -> None:
        hook = AsyncInferenceServiceHook(connection)
        async_methods = protocol_methods(AsyncInferenceServiceHookProtocol) | {"list_pods", "read_pod_log"}
        for method in sorted(async_methods):
            with contextlib.suppress(KubernetesApiError):
                await getattr(hook, method)(*sync_calls[method])
        await hook.close()

    needed = {
        "airflow-worker": requested(local_cluster, drive_sync),
        "airflow-triggerer": requested(local_cluster, lambda: asyncio.run(drive_async())),
    }
    sync_hook.close()
    assert ("namespaced", "", "services/proxy", "create") in needed["airflow-worker"]  # the log is what we think
    assert ("namespaced", "serving.kserve.io", "inferenceservices", "patch") in needed["airflow-worker"]
    grants = granted(RBAC)
    for subject, wanted in needed.items():
        assert wanted <= grants[f"airflow/{subject}"], (subject, sorted(wanted - grants[f"airflow/{subject}"]))
