"""KServe InferenceServices on the local cluster, through the kubernetes client and kubectl only: admission (mode
normalisation and stickiness, framework rewrite, name and implementation checks), the Standard-mode objects, the
storage initializer, the upstream-SDK PyTorch predictor answering v1 and v2 requests, a storageUri rollout, failed
loads (bad URI, a model that crashes on load) and Knative refused. Pod starts are few: each costs a kserve import."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_elastic.localcluster.images import serving_python
from tests.support.waiting import wait_for

GROUP, VERSION, PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"

try:
    serving_python()
except LookupError as err:  # pragma: no cover - the dev setup has it (make serving-venv)
    pytest.skip(str(err), allow_module_level=True)


def save_model(directory: Path, scale: float) -> Path:
    """A TorchScript ``Linear(4, 2)`` computing ``scale * [x0 + x1, x2 + x3]``, saved as ``model.pt``."""
    import torch

    layer = torch.nn.Linear(4, 2, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]]) * scale)
    directory.mkdir(parents=True, exist_ok=True)
    torch.jit.script(layer).save(str(directory / "model.pt"))
    return directory


def isvc_body(name: str, storage_uri: str, mode: str | None = "Standard", **predictor: Any) -> dict[str, Any]:
    annotations = {"serving.kserve.io/deploymentMode": mode} if mode else {}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"predictor": {"pytorch": {"storageUri": storage_uri}, **predictor}},
    }


def condition(isvc: dict[str, Any], kind: str) -> str | None:
    return next((c["status"] for c in isvc.get("status", {}).get("conditions") or [] if c["type"] == kind), None)


def predict(core, namespace: str, path: str, body: dict[str, Any], isvc: str = "digits") -> dict[str, Any]:
    """POST to the predictor through the API server's service proxy (port 80 of ``<isvc>-predictor``)."""
    reply = core.api_client.call_api(
        f"/api/v1/namespaces/{namespace}/services/{isvc}-predictor:80/proxy/{path}",
        "POST",
        body=body,
        header_params={"Content-Type": "application/json"},
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    return json.loads(reply[0].data if isinstance(reply, tuple) else reply.data)


@pytest.fixture
def isvcs(custom, namespace):
    class Isvcs:
        def create(self, body: dict[str, Any]) -> dict[str, Any]:
            return custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

        def get(self, name: str) -> dict[str, Any]:
            return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

        def patch(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
            return custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, body)

        def delete(self, name: str) -> None:
            custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

        def until(self, name: str, what: str, check: Callable[[dict[str, Any]], bool], timeout: float = 60):
            return wait_for(
                lambda: (lambda o: o if check(o) else None)(self.get(name)), timeout, what=f"{name}: {what}"
            )

    return Isvcs()


def predictor_ips(core, namespace: str, name: str) -> list[str]:
    pods = core.list_namespaced_pod(namespace, label_selector=f"app=isvc.{name}-predictor").items
    return [
        p.status.pod_ip
        for p in pods
        if not p.metadata.deletion_timestamp
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    ]


def test_serve_roll_out_and_fail_to_load(api_client, core, isvcs, namespace, kubectl, tmp_path):
    from kubernetes import client

    apps, autoscaling = client.AppsV1Api(api_client), client.AutoscalingV2Api(api_client)
    model_a, model_b = save_model(tmp_path / "a", 1.0), save_model(tmp_path / "b", 10.0)
    created = isvcs.create(isvc_body("digits", f"file://{model_a}", mode="RawDeployment", minReplicas=1, maxReplicas=3))
    # the mutating webhook: legacy mode renamed, the framework predictor rewritten to model.modelFormat
    assert created["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Standard"
    assert created["metadata"]["annotations"]["modelFormat"] == "pytorch"
    assert created["spec"]["predictor"]["model"] == {
        "modelFormat": {"name": "pytorch"},
        "storageUri": f"file://{model_a}",
    }
    ready = isvcs.until(
        "digits",
        "Ready and Loaded",
        lambda o: (
            condition(o, "Ready") == "True" and o["status"]["modelStatus"]["states"]["activeModelState"] == "Loaded"
        ),
    )
    status = ready["status"]
    assert ready["metadata"]["finalizers"] == ["inferenceservice.finalizers"]
    assert status["url"] == f"http://digits-{namespace}.example.com"
    assert status["address"]["url"] == f"http://digits-predictor.{namespace}.svc.cluster.local"
    assert status["components"]["predictor"]["url"] == f"http://digits-predictor-{namespace}.example.com"
    assert status["deploymentMode"] == "Standard"
    assert status["modelStatus"]["transitionStatus"] == "UpToDate"
    assert {condition(ready, c) for c in ("PredictorReady", "IngressReady")} == {"True"}
    assert condition(ready, "Stopped") == "False"

    deployment = apps.read_namespaced_deployment("digits-predictor", namespace)
    assert deployment.spec.selector.match_labels == {"app": "isvc.digits-predictor"}
    labels = deployment.spec.template.metadata.labels
    assert labels["serving.kserve.io/inferenceservice"] == "digits" and labels["component"] == "predictor"
    assert deployment.metadata.owner_references[0].kind == "InferenceService"
    assert status["observedGeneration"] == deployment.status.observed_generation
    service = core.read_namespaced_service("digits-predictor", namespace)
    assert [(p.port, p.target_port) for p in service.spec.ports] == [(80, 8080)]
    hpa = autoscaling.read_namespaced_horizontal_pod_autoscaler("digits-predictor", namespace)
    assert (hpa.spec.min_replicas, hpa.spec.max_replicas) == (1, 3)
    assert hpa.spec.metrics[0].resource.target.average_utilization == 80

    pod = core.list_namespaced_pod(namespace, label_selector="app=isvc.digits-predictor").items[0]
    assert pod.metadata.annotations["internal.serving.kserve.io/storage-initializer-sourceuri"] == f"file://{model_a}"
    assert [c.name for c in pod.spec.init_containers] == ["storage-initializer"]
    assert pod.status.init_container_statuses[0].state.terminated.exit_code == 0

    v1 = predict(core, namespace, "v1/models/digits:predict", {"instances": [[1, 2, 3, 4], [0, 0, 1, 0]]})
    assert v1 == {"predictions": [[3.0, 7.0], [0.0, 1.0]]}
    tensor = {"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}
    v2 = predict(core, namespace, "v2/models/digits/infer", {"inputs": [tensor]})
    assert v2["outputs"][0]["data"] == [3.0, 7.0] and v2["outputs"][0]["shape"] == [1, 2]

    table = kubectl("get", "isvc", "-n", namespace).stdout.splitlines()
    assert table[0].split() == [
        "NAME",
        "URL",
        "READY",
        "PREV",
        "LATEST",
        "PREVROLLEDOUTREVISION",
        "LATESTREADYREVISION",
        "AGE",
    ]
    assert table[1].split()[:3] == ["digits", f"http://digits-{namespace}.example.com", "True"]

    # a new storageUri: a new ReplicaSet rolls out and the new model serves
    one = {"instances": [[1, 2, 3, 4]]}
    isvcs.patch("digits", {"spec": {"predictor": {"model": {"storageUri": f"file://{model_b}"}}}})
    wait_for(
        lambda: (
            (d := apps.read_namespaced_deployment_status("digits-predictor", namespace))
            and d.status.observed_generation == 2
            and d.status.updated_replicas == d.status.available_replicas == 1
            and (d.status.replicas or 0) == 1
        ),
        60,
        what="the rollout",
    )
    assert len(apps.list_namespaced_replica_set(namespace, label_selector="app=isvc.digits-predictor").items) == 2
    assert len(predictor_ips(core, namespace, "digits")) == 1
    assert predict(core, namespace, "v1/models/digits:predict", one) == {"predictions": [[30.0, 70.0]]}

    # an unreachable store: the storage initializer fails as without credentials; the old model keeps serving
    isvcs.patch("digits", {"spec": {"predictor": {"model": {"storageUri": "s3://models/digits/v3"}}}})
    blocked = isvcs.until(
        "digits",
        "BlockedByFailedLoad",
        lambda o: o["status"]["modelStatus"]["transitionStatus"] == "BlockedByFailedLoad",
    )
    failure = blocked["status"]["modelStatus"]["lastFailureInfo"]
    assert failure["reason"] == "ModelLoadFailed" and failure["exitCode"] == 1
    assert "Unable to locate credentials" in failure["message"]
    assert condition(blocked, "Ready") == "True"  # Standard mode: the old pod is still available
    assert len(predictor_ips(core, namespace, "digits")) == 1
    assert predict(core, namespace, "v1/models/digits:predict", one) == {"predictions": [[30.0, 70.0]]}

    # deleted with its children (finalizer removed, owner references collected)
    isvcs.delete("digits")
    wait_for(
        lambda: (
            not apps.list_namespaced_deployment(namespace).items and not core.list_namespaced_service(namespace).items
        ),
        what="the children to go",
    )


def test_model_that_crashes_on_load(isvcs, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.pt").write_bytes(b"not a TorchScript archive")
    isvcs.create(isvc_body("broken", f"file://{broken}"))
    # the first crash is reported at once; the immediate restart then shows Pending again, the failure info stays
    failed = isvcs.until(
        "broken", "the failure", lambda o: (o.get("status", {}).get("modelStatus") or {}).get("lastFailureInfo")
    )
    failure = failed["status"]["modelStatus"]["lastFailureInfo"]
    assert failure["reason"] == "ModelLoadFailed" and failure["exitCode"] == 1
    assert "failed to load" in failure["message"] and "model.pt" in failure["message"]
    assert condition(failed, "Ready") != "True"


def test_custom_predictor_container(core, isvcs, namespace, tmp_path):
    model = save_model(tmp_path / "model", 1.0)
    echo = Path(__file__).parents[1] / "data" / "scripts" / "http_echo.py"
    container = {
        "name": "kserve-container",
        "image": "me/echo:1",
        # the version it answers with: the files the storage initializer copied, and STORAGE_URI as rewritten
        "command": ["sh", "-c", f'VERSION="$(ls "$LOCALCLUSTER_MOUNT_MNT_MODELS")@$STORAGE_URI" exec python {echo}'],
        "env": [
            {"name": "STORAGE_URI", "value": f"file://{model}"},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
    }
    body = isvc_body("echo", "unused")
    body["spec"]["predictor"] = {"containers": [container]}
    isvcs.create(body)
    isvcs.until("echo", "Ready", lambda o: condition(o, "Ready") == "True")
    reply = predict(core, namespace, "v1/models/echo:predict", {"instances": [[1]]}, isvc="echo")
    assert reply["version"] == "model.pt@/mnt/models" and reply["path"] == "/v1/models/echo:predict"


def test_canary_then_promote(api_client, core, isvcs, namespace, tmp_path):
    from kubernetes import client

    apps = client.AppsV1Api(api_client)
    stable, candidate = save_model(tmp_path / "stable", 1.0), save_model(tmp_path / "candidate", 10.0)
    body = isvc_body("shop", f"file://{stable}")
    canary_model = {"name": "kserve-container", "modelFormat": {"name": "pytorch"}, "storageUri": f"file://{candidate}"}
    body["spec"]["canary"] = [{"trafficPercent": 50, "predictor": {"name": "v2", "model": canary_model}}]
    isvcs.create(body)
    ready = isvcs.until(
        "shop",
        "the canary ready",
        lambda o: condition(o, "Ready") == "True" and condition(o, "CanaryPredictorReady") == "True",
    )
    assert ready["status"]["canaryStatuses"] == [{"name": "v2", "ready": True, "trafficPercent": 50}]
    assert apps.read_namespaced_deployment("shop-v2-predictor", namespace).spec.replicas == 1  # ceil(1 x 50%)
    one = {"instances": [[1, 2, 3, 4]]}
    assert predict(core, namespace, "v1/models/shop:predict", one, isvc="shop") == {"predictions": [[3.0, 7.0]]}
    assert predict(core, namespace, "v1/models/shop:predict", one, isvc="shop-v2") == {"predictions": [[30.0, 70.0]]}

    # promote: the stable predictor takes the canary's name and model, the canary entry goes
    promoted = {"name": "v2", "model": {"storageUri": f"file://{candidate}"}}
    isvcs.patch("shop", {"spec": {"predictor": promoted, "canary": None}})
    wait_for(
        lambda: (
            [d.metadata.name for d in apps.list_namespaced_deployment(namespace).items] == ["shop-v2-predictor"]
            and [s.metadata.name for s in core.list_namespaced_service(namespace).items] == ["shop-v2-predictor"]
        ),
        what="the old stable predictor deleted as an orphan",
    )
    done = isvcs.until(
        "shop", "Ready again", lambda o: condition(o, "Ready") == "True" and "canaryStatuses" not in o["status"]
    )
    assert condition(done, "CanaryPredictorReady") is None
    assert done["status"]["address"]["url"] == f"http://shop-v2-predictor.{namespace}.svc.cluster.local"
    assert predict(core, namespace, "v1/models/shop:predict", one, isvc="shop-v2") == {"predictions": [[30.0, 70.0]]}


def test_stop_annotation(api_client, isvcs, namespace):
    from kubernetes import client

    apps = client.AppsV1Api(api_client)
    body = isvc_body("paused", "file:///nowhere")
    body["metadata"]["annotations"]["serving.kserve.io/stop"] = "True"
    isvcs.create(body)
    stopped = isvcs.until("paused", "Stopped", lambda o: condition(o, "Stopped") == "True")
    assert [(c["type"], c["status"], c.get("reason")) for c in stopped["status"]["conditions"]] == [
        ("PredictorReady", "False", "Stopped"),
        ("Ready", "False", "Stopped"),
        ("Stopped", "True", None),
    ]
    assert not apps.list_namespaced_deployment(namespace).items
    isvcs.patch("paused", {"metadata": {"annotations": {"serving.kserve.io/stop": None}}})
    resumed = isvcs.until("paused", "resumed", lambda o: condition(o, "Stopped") == "False")
    assert resumed["status"]["url"] and apps.read_namespaced_deployment("paused-predictor", namespace)


def test_knative_rejected_and_mode_sticky(core, isvcs, namespace):
    from kubernetes.client.exceptions import ApiException

    isvcs.create(isvc_body("serverless", "file:///nowhere", mode=None))  # the stock default mode: Serverless
    rejected = isvcs.until("serverless", "the mode recorded", lambda o: o.get("status", {}).get("deploymentMode"))
    assert rejected["status"]["deploymentMode"] == "Knative"
    events = wait_for(
        lambda: [e for e in core.list_namespaced_event(namespace).items if e.reason == "ServerlessModeRejected"],
        what="ServerlessModeRejected",
    )
    assert events[0].type == "Warning" and "Knative Services are not available" in events[0].message
    assert not core.list_namespaced_pod(namespace).items
    with pytest.raises(ApiException) as denied:
        isvcs.patch("serverless", {"metadata": {"annotations": {"serving.kserve.io/deploymentMode": "Standard"}}})
    assert denied.value.status == 403
    assert "update rejected: deploymentMode cannot be changed from 'Knative' to 'Standard'" in denied.value.body

    # a format the local cluster has no serving runtime for
    body = isvc_body("iris", "file:///nowhere")
    body["spec"]["predictor"] = {"sklearn": {"storageUri": "file:///nowhere"}}
    isvcs.create(body)
    invalid = isvcs.until("iris", "InvalidSpec", lambda o: "modelStatus" in o.get("status", {}))
    assert invalid["status"]["modelStatus"]["transitionStatus"] == "InvalidSpec"
    assert invalid["status"]["modelStatus"]["lastFailureInfo"]["reason"] == "NoSupportingRuntime"
    assert any(e.reason == "InternalError" for e in core.list_namespaced_event(namespace).items)


@pytest.mark.parametrize(
    ("name", "predictor", "message"),
    [
        ("9lives", {"model": {"modelFormat": {"name": "pytorch"}}}, "a InferenceService name must consist of"),
        (
            "two",
            {"model": {"modelFormat": {"name": "pytorch"}}, "containers": [{"name": "kserve-container", "image": "x"}]},
            "exactly one of [Name, SKLearn",
        ),
        (
            "scale",
            {"model": {"modelFormat": {"name": "pytorch"}}, "minReplicas": 3, "maxReplicas": 2},
            "'MinReplicas' cannot be greater than MaxReplicas",
        ),
    ],
)
def test_validating_webhook(isvcs, name, predictor, message):
    from kubernetes.client.exceptions import ApiException

    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {"predictor": predictor},
    }
    with pytest.raises(ApiException) as denied:
        isvcs.create(body)
    assert denied.value.status == 403 and message in denied.value.body
    assert "inferenceservice.kserve-webhook-server.validator" in denied.value.body
