"""``InferenceServiceOperator`` and ``ScaleInferenceServiceOperator`` against the local cluster's KServe, with the real
hooks (sync, and async through the trigger): a first publish answered by a real prediction; an update to a new model
while requests through the service proxy never fail; a model that crashes on load and a bad storage URI each fail
with KServe's reason and roll back to the old model, which answers again; a retried publish writes nothing; scaling
up and down. One InferenceService goes through all of it: each predictor start costs a kserve import."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from airflow_elastic.localcluster.images import serving_python
from tests.support.operator_fakes import StateStore, TaskInstance
from tests.support.waiting import wait_for

try:
    serving_python()
except LookupError as err:  # pragma: no cover - the dev setup has it (make serving-venv)
    pytest.skip(str(err), allow_module_level=True)

NAME = "digits"
ROW = {"instances": [[1.0, 1.0, 1.0, 1.0]]}


def save_model(directory: Path, scale: float) -> str:
    """A TorchScript ``Linear(4, 1)`` answering ``scale * sum(x)`` (4 * scale for ``ROW``), as ``model.pt``."""
    import torch

    layer = torch.nn.Linear(4, 1, bias=False)
    with torch.no_grad():
        layer.weight.fill_(scale)
    directory.mkdir(parents=True, exist_ok=True)
    torch.jit.script(layer).save(str(directory / "model.pt"))
    return str(directory)


def publish(connection: str, namespace: str, uri: str, store: StateStore, *, deferrable: bool = False) -> Any:
    """Run the operator as a task would (through its trigger when ``deferrable``); its result or its exception."""
    from airflow.sdk import DAG

    from airflow_elastic.operators import InferenceServiceOperator

    with DAG("serving", schedule=None):
        op = InferenceServiceOperator(
            task_id="serve",
            name=NAME,
            storage_uri=uri,
            model_format="pytorch",
            smoke_request=ROW,
            namespace=namespace,
            kubernetes_conn_id=connection,
            deferrable=deferrable,
            poll_interval=0.2,
            rollout_timeout=60,
        )
    context = {"ti": TaskInstance(task_id="serve"), "task_state_store": store}
    step: Any = lambda: op.execute(context)  # noqa: E731
    while True:
        try:
            return step()
        except TaskDeferred as deferred:
            event = asyncio.run(first_event(deferred.trigger))
            method, kwargs = getattr(op, deferred.method_name), deferred.kwargs or {}
            step = lambda m=method, e=event, k=kwargs: m(context, e, **k)  # noqa: E731


async def first_event(trigger: Any) -> dict[str, Any]:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("the trigger fired nothing")


class Traffic(threading.Thread):
    """POSTs ``ROW`` through the API server's service proxy, one request after another, keeping every answer; no
    retries, so a single failed request shows."""

    def __init__(self, api_client: Any, namespace: str):
        super().__init__(daemon=True)
        self.api_client, self.namespace = api_client, namespace
        self.answers: list[float] = []
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.answers.append(predict(self.api_client, self.namespace))
            except Exception as error:  # every failure is the test's finding
                self.errors.append(repr(error)[:300])


def available(apps: Any, namespace: str) -> int:
    return apps.read_namespaced_deployment(f"{NAME}-predictor", namespace).status.available_replicas or 0


def predict(api_client: Any, namespace: str) -> float:
    path = f"/api/v1/namespaces/{namespace}/services/{NAME}-predictor:80/proxy/v1/models/{NAME}:predict"
    response = api_client.call_api(
        path,
        "POST",
        body=ROW,
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
        _request_timeout=10,
    )
    return float(json.loads(response.data)["predictions"][0][0])


def test_publish_update_fail_roll_back_retry_and_scale(
    connection, namespace, api_client, custom, local_cluster, tmp_path
):
    from kubernetes import client

    from airflow_elastic.operators import ScaleInferenceServiceOperator

    v1, v2 = save_model(tmp_path / "v1", 1.0), save_model(tmp_path / "v2", 2.0)

    first = publish(connection, namespace, f"file://{v1}", StateStore())
    assert first["smoke_response"] == {"predictions": [[4.0]]} and first["previous_storage_uri"] is None
    assert (first["mode"], first["replicas"], first["url"]) == ("Standard", 1, f"http://{NAME}-{namespace}.example.com")

    # A new model, through the trigger, while requests flow: the old model answers until the new one is available.
    traffic = Traffic(api_client, namespace)
    traffic.start()
    try:
        store = StateStore()
        second = publish(connection, namespace, v2, store, deferrable=True)
        wait_for(lambda: len(traffic.answers) > 5 and traffic.answers[-1] == 8.0, 30, what="answers of v2")
    finally:
        traffic.stop.set()
        traffic.join(15)
    assert second["smoke_response"] == {"predictions": [[8.0]]} and second["previous_storage_uri"] == f"file://{v1}"
    assert not traffic.errors, traffic.errors[:5]
    assert traffic.answers[0] == 4.0 and set(traffic.answers) == {4.0, 8.0}, sorted(set(traffic.answers))

    # A retry of that publish (same task state) writes nothing, and still knows what it replaced.
    version = custom.get_namespaced_custom_object("serving.kserve.io", "v1beta1", namespace, "inferenceservices", NAME)
    mark = local_cluster.request_count()
    again = publish(connection, namespace, v2, store)
    after = custom.get_namespaced_custom_object("serving.kserve.io", "v1beta1", namespace, "inferenceservices", NAME)
    assert after["metadata"]["resourceVersion"] == version["metadata"]["resourceVersion"]
    writes = [r for r in local_cluster.requests(since=mark) if r["verb"] in ("create", "patch", "update", "delete")]
    assert [(r["resource"], r["subresource"]) for r in writes] == [("services", "proxy")], writes  # the smoke POST
    assert again["previous_storage_uri"] == f"file://{v1}" and again["smoke_response"] == {"predictions": [[8.0]]}

    # A model that crashes on load, then a URI the storage initializer cannot fetch: each fails with KServe's reason
    # and rolls back to v2, which answers again.
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.pt").write_bytes(b"not a TorchScript archive")
    for uri, container in ((str(broken), "kserve-container"), ("s3://no-such-bucket/model", "storage-initializer")):
        with pytest.raises(AirflowException) as failed:
            publish(connection, namespace, uri, StateStore())
        message = str(failed.value)
        assert "ModelLoadFailed" in message and f"container {container}, exit code 1" in message, message
        assert f"rolled back to {v2}, which serves again" in message, message
        assert predict(api_client, namespace) == 8.0

    # Scale up, then down; each run patches only what differs. The HPA moves the Deployment: up to a raised floor at
    # once, down when the ceiling drops below the size (a lowered floor alone scales in only on low metrics).
    apps = client.AppsV1Api(api_client)
    for low, high in ((2, 3), (1, 1)):
        op = ScaleInferenceServiceOperator(
            task_id="scale",
            name=NAME,
            min_replicas=low,
            max_replicas=high,
            namespace=namespace,
            kubernetes_conn_id=connection,
        )
        result = op.execute({})
        assert result["min_replicas"] == low and "min_replicas" in result["changed"], result
        wait_for(lambda n=low: available(apps, namespace) == n, 60, what=f"{low} available predictor replicas")
    assert op.execute({})["changed"] == {}
