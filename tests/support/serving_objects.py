"""InferenceService, Deployment and pod objects shaped as KServe v0.20 and kube write them, for serving tests."""

from __future__ import annotations

from typing import Any

from airflow_elastic.serving import inference_service as serving
from airflow_elastic.serving import rollout


def isvc(
    uri: str = "file:///models/v1",
    *,
    name: str = "digits",
    ready: bool = True,
    active: str | None = "Loaded",
    transition: str = "UpToDate",
    failure: dict[str, Any] | None = None,
    mode: str = "Standard",
) -> dict[str, Any]:
    model_status: dict[str, Any] = {"transitionStatus": transition}
    if active is not None:
        model_status["states"] = {"activeModelState": active, "targetModelState": active}
    if failure is not None:
        model_status["lastFailureInfo"] = failure
    body = serving.render(name, "ns", uri, serving.Predictor(model_format="pytorch", mode=mode))
    body["metadata"].update(generation=1, resourceVersion="1")
    body["status"] = {
        "deploymentMode": mode,
        "url": f"http://{name}-ns.example.com",
        "conditions": [
            {"type": "PredictorReady", "status": "True" if ready else "False"},
            {"type": "Ready", "status": "True" if ready else "False"},
        ],
        "modelStatus": model_status,
    }
    return body


def deployment(
    uri: str = "file:///models/v1",
    *,
    name: str = "digits",
    generation: int = 2,
    observed: int = 2,
    replicas: int = 1,
    updated: int = 1,
    available: int = 1,
    progressing: str = "NewReplicaSetAvailable",
    progressing_status: str = "True",
) -> dict[str, Any]:
    labels = {"app": f"isvc.{name}-predictor"}
    return {
        "metadata": {"name": f"{name}-predictor", "namespace": "ns", "generation": generation},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels, "annotations": {rollout.SOURCE_URI_ANNOTATION: uri}}},
        },
        "status": {
            "observedGeneration": observed,
            "replicas": replicas,
            "updatedReplicas": updated,
            "availableReplicas": available,
            "conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                {"type": "Progressing", "status": progressing_status, "reason": progressing, "message": "m"},
            ],
        },
    }


def pod(name: str, uri: str, *, init_exit: int | None = None, crash_exit: int | None = None) -> dict[str, Any]:
    """A predictor pod; ``init_exit``: its storage initializer ended so; ``crash_exit``: its server crash-loops."""
    status: dict[str, Any] = {"phase": "Running", "containerStatuses": [{"name": "kserve-container", "state": {}}]}
    if init_exit is not None:
        ended = {"exitCode": init_exit, "reason": "Error", "message": "unsupported storage scheme"}
        status["initContainerStatuses"] = [{"name": "storage-initializer", "state": {"terminated": ended}}]
        status["phase"] = "Pending"
    if crash_exit is not None:
        status["containerStatuses"] = [
            {
                "name": "kserve-container",
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": crash_exit, "reason": "Error"}},
                "restartCount": 1,
            }
        ]
    return {"metadata": {"name": name, "annotations": {rollout.SOURCE_URI_ANNOTATION: uri}}, "status": status}
