"""The InferenceService pieces that need no cluster: KServe's status rules, the objects it builds, its webhooks'
defaults and checks and the pod webhook's storage initializer."""

from __future__ import annotations

import copy

import pytest

from airflow_elastic.localcluster.admission.inferenceservice import apply_defaults, validation_message
from airflow_elastic.localcluster.admission.storageinitializer import inject
from airflow_elastic.localcluster.controllers import isvccanary, isvcstatus
from airflow_elastic.localcluster.controllers import isvcobjects as objects


def isvc(predictor: dict, annotations: dict | None = None) -> dict:
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "m", "namespace": "ns", "uid": "u1", "annotations": annotations or {}},
        "spec": {"predictor": predictor},
    }


def deployment(*conditions: tuple[str, str, str, str], generation: int = 2) -> dict:
    found = [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions]
    return {"status": {"observedGeneration": generation, "conditions": found}}


def ready_state(status: dict, kind: str) -> tuple[str, str]:
    found = isvcstatus.condition(status, kind) or {}
    return found.get("status", ""), found.get("reason", "")


def test_rolling_update_keeps_predictor_ready():
    # v0.20 PropagateRawStatus: Progressing=True/ReplicaSetUpdated downgrades to Unknown only without Available
    status: dict = {}
    isvcstatus.initialize(status)
    isvcstatus.set_condition(status, "IngressReady", "True")
    rolling = deployment(
        ("Available", "True", "MinimumReplicasAvailable", "ok"), ("Progressing", "True", "ReplicaSetUpdated", "…")
    )
    isvcstatus.propagate_raw_status(status, rolling, "http://c")
    assert ready_state(status, "PredictorReady") == ("True", "")
    assert ready_state(status, "Ready") == ("True", "")
    assert status["observedGeneration"] == 2 and status["components"]["predictor"]["url"] == "http://c"
    starting = deployment(("Available", "False", "MinimumReplicasUnavailable", "no"), ("Progressing", "True", "X", ""))
    isvcstatus.propagate_raw_status(status, starting, "http://c")
    assert ready_state(status, "PredictorReady") == ("False", "MinimumReplicasUnavailable")
    assert ready_state(status, "Ready") == ("False", "MinimumReplicasUnavailable")


def test_progress_deadline_and_new_replicaset():
    status: dict = {}
    isvcstatus.initialize(status)
    stuck = deployment(
        ("Progressing", "False", "ProgressDeadlineExceeded", 'ReplicaSet "r" has timed out progressing.')
    )
    isvcstatus.propagate_raw_status(status, stuck, "http://c")
    assert ready_state(status, "PredictorReady") == ("False", "ProgressDeadlineExceeded")
    assert "url" not in status["components"]["predictor"]
    assert ready_state(status, "Ready")[0] == "False"
    isvcstatus.propagate_raw_status(status, deployment(("Progressing", "True", "NewReplicaSetAvailable", "")), "u")
    assert ready_state(status, "PredictorReady") == ("True", "")
    assert ready_state(status, "Ready")[0] == "Unknown"  # IngressReady is still unknown


def pod(name: str, created: str, *, init: dict | None = None, main: dict | None = None, ready: bool = False) -> dict:
    status: dict = {"phase": "Running" if ready else "Pending"}
    status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    if init is not None:
        status["initContainerStatuses"] = [{"name": "storage-initializer", **init}]
    if main is not None:
        status["containerStatuses"] = [{"name": "kserve-container", **main}]
    return {"metadata": {"name": name, "creationTimestamp": created}, "status": status}


def test_model_status_reads_the_newest_pod():
    status: dict = {"conditions": [{"type": "Ready", "status": "True"}]}
    old = pod("a", "2026-01-01T00:00:00Z", init={"state": {"terminated": {"exitCode": 0}}}, ready=True)
    failing = pod(
        "b",
        "2026-01-01T00:01:00Z",
        init={"state": {"terminated": {"reason": "Error", "exitCode": 1, "message": "no credentials"}}},
    )
    assert isvcstatus.propagate_model_status(status, [old, failing])
    model = status["modelStatus"]
    assert model["transitionStatus"] == "BlockedByFailedLoad"
    assert model["lastFailureInfo"] == {"reason": "ModelLoadFailed", "message": "no credentials", "exitCode": 1}
    assert model["copies"] == {"failedCopies": 0, "totalCopies": 1}
    assert isvcstatus.propagate_model_status(status, [old])
    assert model["transitionStatus"] == "UpToDate" and model["states"]["activeModelState"] == "Loaded"


def test_model_status_crash_loop_and_pending():
    status: dict = {"conditions": [{"type": "Ready", "status": "False"}]}
    crashing = pod(
        "c",
        "2026-01-01T00:00:00Z",
        main={
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"reason": "Error", "exitCode": 3, "message": "bad model"}},
        },
    )
    isvcstatus.propagate_model_status(status, [crashing])
    assert status["modelStatus"]["states"]["targetModelState"] == "FailedToLoad"
    assert status["modelStatus"]["lastFailureInfo"]["exitCode"] == 3
    fresh: dict = {}
    isvcstatus.propagate_model_status(fresh, [])
    assert fresh["modelStatus"]["transitionStatus"] == "InProgress"
    retried = pod("d", "2026-01-01T00:00:00Z", init={"state": {"running": {}}, "lastState": {"terminated": {}}})
    assert not isvcstatus.propagate_model_status({}, [retried])  # requeue: between an error and a retry


def test_objects_follow_kserve():
    spec = isvc(
        {"name": "v2", "minReplicas": 0, "scaleMetric": "memory", "model": {"modelFormat": {"name": "pytorch"}}}
    )
    hpa = objects.hpa(spec)
    assert hpa["metadata"]["name"] == "m-v2-predictor"
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"], hpa["spec"]["metrics"]) == (1, 1, [])
    spec["metadata"]["annotations"] = {"modelFormat": "pytorch", "team": "shop"}
    built = objects.deployment(spec)
    assert built["spec"]["replicas"] == 1
    assert built["spec"]["template"]["metadata"]["annotations"] == {"team": "shop"}  # the disallowed list holds
    container = built["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["--model_name=m", "--model_dir=/mnt/models", "--http_port=8080"]
    with pytest.raises(objects.NoSupportingRuntime):
        objects.deployment(isvc({"model": {"modelFormat": {"name": "sklearn"}}}))
    custom = isvc(
        {
            "containers": [
                {
                    "name": "kserve-container",
                    "image": "me/server:1",
                    "ports": [{"containerPort": 9000, "name": "http1"}],
                    "env": [{"name": "STORAGE_URI", "value": "file:///models"}],
                }
            ]
        },
        {"serving.kserve.io/autoscalerClass": "none"},
    )
    built = objects.deployment(custom)
    assert built["spec"]["template"]["metadata"]["annotations"][objects.STORAGE_URI_ANNOTATION] == "file:///models"
    probe = built["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    assert probe["tcpSocket"] == {"port": 9000} and probe["periodSeconds"] == 10
    service = objects.service(custom, built["spec"]["template"]["spec"])
    assert service["spec"]["ports"] == [{"name": "http1", "port": 80, "targetPort": 9000, "protocol": "TCP"}]
    assert not objects.wants_hpa(custom)


def test_webhook_defaults_and_checks():
    obj = isvc({"pytorch": {"storageUri": "s3://b/m"}}, {"serving.kserve.io/deploymentMode": "RawDeployment"})
    apply_defaults(obj)
    assert obj["spec"]["predictor"] == {"model": {"storageUri": "s3://b/m", "modelFormat": {"name": "pytorch"}}}
    assert obj["metadata"]["annotations"] == {"modelFormat": "pytorch", "serving.kserve.io/deploymentMode": "Standard"}
    assert validation_message(obj) is None
    old = copy.deepcopy(obj) | {"status": {"deploymentMode": "RawDeployment"}}
    changed = copy.deepcopy(obj)
    changed["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] = "Knative"
    assert validation_message(changed, old) == (
        "update rejected: deploymentMode cannot be changed from 'Standard' to 'Knative'"
    )
    assert validation_message(obj, old) is None  # the legacy status value is parsed first
    bare = isvc({"model": {"modelFormat": {"name": "pytorch"}}})
    apply_defaults(bare)
    assert "serving.kserve.io/deploymentMode" not in bare["metadata"]["annotations"]  # stock default: not written
    assert validation_message(isvc({})).startswith("exactly one of [Name, SKLearn")


def test_storage_initializer_injected_once():
    body = {
        "metadata": {"annotations": {objects.STORAGE_URI_ANNOTATION: "file:///m"}},
        "spec": {"containers": [{"name": "kserve-container", "env": [{"name": "STORAGE_URI", "value": "file:///m"}]}]},
    }
    inject(body)
    inject(body)
    spec = body["spec"]
    assert [(c["name"], c["args"]) for c in spec["initContainers"]] == [
        ("storage-initializer", ["file:///m", "/mnt/models"])
    ]
    assert spec["volumes"] == [{"name": "kserve-provision-location", "emptyDir": {}}]
    user = spec["containers"][0]
    assert user["volumeMounts"] == [{"name": "kserve-provision-location", "mountPath": "/mnt/models", "readOnly": True}]
    assert user["env"] == [{"name": "STORAGE_URI", "value": "/mnt/models"}]
    untouched = {"metadata": {}, "spec": {"containers": [{"name": "kserve-container"}]}}
    inject(untouched)
    assert "initContainers" not in untouched["spec"]


def with_canary(stable: dict, *canaries: dict) -> dict:
    obj = isvc(stable, {"serving.kserve.io/deploymentMode": "Standard"})
    obj["spec"]["canary"] = list(canaries)
    return obj


def test_canary_objects_and_status():
    stable = {"minReplicas": 3, "maxReplicas": 6, "model": {"modelFormat": {"name": "pytorch"}, "storageUri": "a"}}
    canary = {
        "trafficPercent": 10,
        "predictor": {"name": "v2", "model": {"name": "kserve-container", "storageUri": "b"}},
    }
    obj = with_canary(stable, canary)
    assert isvccanary.replicas(obj, canary) == 1  # ceil(3 x 10 / 100)
    built = isvccanary.canary_isvc(obj, canary)["spec"]["predictor"]
    assert built["model"] == {"modelFormat": {"name": "pytorch"}, "storageUri": "b", "name": "kserve-container"}
    assert (built["minReplicas"], "maxReplicas" in built) == (1, False)
    ((deployment, service),) = isvccanary.children(obj)
    assert deployment["metadata"]["name"] == service["metadata"]["name"] == "m-v2-predictor"
    assert deployment["spec"]["replicas"] == 1
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations[objects.STORAGE_URI_ANNOTATION] == "b"
    assert isvccanary.expected(obj) == {"m-predictor", "m-v2-predictor"}
    status: dict = {}
    isvccanary.set_status(status, obj, {"m-v2-predictor": 0})
    assert status["canaryStatuses"] == [{"name": "v2", "ready": False, "trafficPercent": 10}]
    assert ready_state(status, "CanaryPredictorReady") == ("False", "CanariesNotReady")
    isvccanary.set_status(status, obj, {"m-v2-predictor": 1})
    assert ready_state(status, "CanaryPredictorReady") == ("True", "")
    obj["spec"]["canary"] = []  # rolled back: the status and the condition go
    isvccanary.set_status(status, obj, {})
    assert "canaryStatuses" not in status and isvcstatus.condition(status, "CanaryPredictorReady") is None


@pytest.mark.parametrize(
    ("canary", "message"),
    [
        ({"trafficPercent": 5, "predictor": {"model": {}}}, "canary[0] predictor.name is required"),
        ({"trafficPercent": 5, "predictor": {"name": "v2", "maxReplicas": 2, "model": {}}}, "must not set maxReplicas"),
        (
            {"trafficPercent": 5, "predictor": {"name": "v2", "minReplicas": 4, "model": {}}},
            'canary "v2" minReplicas (4) must not exceed stable predictor minReplicas (1)',
        ),
        ({"trafficPercent": 5, "predictor": {"name": "v2"}}, 'canary "v2" predictor: exactly one of'),
    ],
)
def test_canary_webhook(canary, message):
    obj = with_canary({"model": {"modelFormat": {"name": "pytorch"}, "storageUri": "a"}}, canary)
    assert message in validation_message(obj)


def test_canary_webhook_totals_mode_and_names():
    stable = {"model": {"modelFormat": {"name": "pytorch"}, "storageUri": "a"}}
    one = {"trafficPercent": 60, "predictor": {"name": "v2", "model": {}}}
    two = {"trafficPercent": 50, "predictor": {"name": "v3", "model": {}}}
    assert (
        validation_message(with_canary(stable, one, two)) == "sum of canary trafficPercent values (110) must be <= 100"
    )
    assert "is duplicated" in validation_message(with_canary(stable, one, one))
    knative = with_canary(stable, one)
    knative["metadata"]["annotations"] = {}
    assert validation_message(knative) == "canary is only supported in Standard deployment mode"
    old, renamed = with_canary(copy.deepcopy(stable)), with_canary({**copy.deepcopy(stable), "name": "v2"})
    assert validation_message(renamed, old) == "predictor.name change requires a model change (e.g. storageUri)"
    renamed["spec"]["predictor"]["model"]["storageUri"] = "b"
    assert validation_message(renamed, old) is None
