"""``docker/k8s/rbac.yaml``'s serving Role: exactly the InferenceService and Deployment rows of the KServe client
table (``docs/serving.md``) plus ``services/proxy``, and enough for every request the serving hooks send.

Each serving hook method is driven against the local cluster (refusals such as a 404 or a 503 were still authorised);
the request log says which (API group, resource, verb) it sent, and each must be granted to the identity that uses
that hook (the worker: ``InferenceServiceHook``, the serving operators'; the triggerer: ``AsyncInferenceServiceHook``,
``InferenceServiceTrigger``'s), through every method of its protocol.
"""

from __future__ import annotations

import asyncio

import yaml

from airflow_elastic.hooks.protocol import AsyncInferenceServiceHookProtocol, InferenceServiceHookProtocol
from airflow_elastic.hooks.retry import RetryPolicy
from airflow_elastic.serving import inference_service as serving
from airflow_elastic.waiting.logcursor import LogRequest
from tests.support.paths import ROOT
from tests.support.rbac import RBAC, SERVING_ROLE, Calls, drive, drive_async, granted, requested, sending_methods

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


def test_the_serving_trigger_constructs_the_hook_driven_here():
    from airflow_elastic.triggers.inference_service import InferenceServiceTrigger

    assert (
        InferenceServiceTrigger.hook_class == "airflow_elastic.hooks.async_inference_service.AsyncInferenceServiceHook"
    )


def test_every_serving_hook_request_is_granted_to_the_identity_sending_it(connection, namespace, local_cluster):
    from airflow_elastic.hooks.async_inference_service import AsyncInferenceServiceHook
    from airflow_elastic.hooks.inference_service import InferenceServiceHook

    body = serving.render("rbac", namespace, "file:///nowhere", serving.Predictor(model_format="pytorch"))
    pod, container = "rbac-predictor-x", "kserve-container"
    reads: Calls = {
        "get_inference_service": [(namespace, "rbac")],
        "get_deployment": [(namespace, "rbac-predictor")],
        "list_pods": [(namespace, "app=isvc.rbac-predictor")],
        "list_events": [(namespace, "involvedObject.name=rbac")],
        "read_pod_log": [(namespace, pod, container)],
        "read_pod_log_chunk": [(namespace, pod, container, LogRequest())],
    }
    sync_calls: Calls = {
        "create_inference_service": [(namespace, body)],
        **reads,
        "list_pods_versioned": [(namespace, "app=isvc.rbac-predictor")],  # every workload hook's (PodHook's)
        "watch_pods": [(namespace, "app=isvc.rbac-predictor", "", 1)],
        "patch_inference_service": [(namespace, "rbac", {"spec": {"predictor": {"minReplicas": 1}}})],
        # readiness (GET), then the smoke request (POST); the proxy's 503s were still authorised
        "call_service": [(namespace, "rbac-predictor", "v1/models/rbac", b) for b in (None, {"instances": [[0.0]]})],
    }
    async_calls: Calls = {
        **reads,
        "list_pods_versioned": [(namespace, "app=isvc.rbac-predictor")],
        "list_events_versioned": [(namespace, "type=Warning")],
        "watch_pods": [(namespace, "app=isvc.rbac-predictor", "", 1)],  # each watch ends after 1 s
        "watch_events": [(namespace, "type=Warning", "", 1)],
        "stream_pod_log": [(namespace, pod, container, LogRequest(follow=True))],
    }
    # Every serving method that talks to the API server is driven: a new one must be added here.
    assert set(sync_calls) == sending_methods(InferenceServiceHookProtocol)
    assert set(async_calls) == sending_methods(AsyncInferenceServiceHookProtocol)

    needed = {
        "airflow-worker": requested(
            local_cluster,
            lambda: drive(InferenceServiceHook(connection, retry=RetryPolicy(attempts=1)), sync_calls),  # 503s: once
        ),
        "airflow-triggerer": requested(
            local_cluster, lambda: asyncio.run(drive_async(AsyncInferenceServiceHook(connection), async_calls))
        ),
    }
    # The log is what we think: each hook's requests are in it.
    assert ("namespaced", "", "services/proxy", "create") in needed["airflow-worker"]
    assert ("namespaced", "serving.kserve.io", "inferenceservices", "patch") in needed["airflow-worker"]
    assert ("namespaced", "", "pods", "watch") in needed["airflow-triggerer"]
    grants = granted(RBAC)
    for subject, wanted in needed.items():
        assert wanted <= grants[f"airflow/{subject}"], (subject, sorted(wanted - grants[f"airflow/{subject}"]))
