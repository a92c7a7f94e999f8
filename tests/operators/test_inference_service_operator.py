"""``InferenceServiceOperator`` and ``ScaleInferenceServiceOperator`` over a fake serving hook: what they write, when
they write nothing, how they finish, smoke-test and roll back."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from airflow_elastic.hooks.errors import AlreadyExists
from airflow_elastic.localcluster.patch import merge_patch
from airflow_elastic.operators import InferenceServiceOperator, ScaleInferenceServiceOperator
from airflow_elastic.serving.rollout import RolloutEvent
from airflow_elastic.training.spec import SpecError
from tests.support.operator_fakes import StateStore, TaskInstance
from tests.support.serving_objects import isvc

V1, V2 = "file:///models/v1", "file:///models/v2"
SMOKE = {"instances": [[0.0] * 64]}


class FakeServingHook:
    """InferenceServices in a dict (merge patches applied, resourceVersion bumped); ``writes`` records each write."""

    def __init__(self, stored: dict[str, Any] | None = None):
        self.stored = copy.deepcopy(stored)
        self.writes: list[tuple[str, Any]] = []
        self.requests: list[tuple[str, Any]] = []

    def get_namespace(self) -> str | None:
        return "ns"

    def get_connection_extras(self) -> dict[str, Any]:
        return {}

    def get_inference_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.stored)

    def create_inference_service(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.stored is not None:
            raise AlreadyExists(409, "AlreadyExists", "exists")
        self.writes.append(("create", body))
        self.stored = {**copy.deepcopy(body), "status": {}}
        self.stored["metadata"]["resourceVersion"] = "1"
        return copy.deepcopy(self.stored)

    def patch_inference_service(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(("patch", patch))
        self.stored = merge_patch(self.stored, patch)
        self.stored["metadata"]["resourceVersion"] = str(int(self.stored["metadata"]["resourceVersion"]) + 1)
        return copy.deepcopy(self.stored)

    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None  # the waits are the trigger's and rollout.judge's (tested there); these tests feed their events

    def call_service(self, namespace: str, service: str, path: str, body: Any = None) -> Any:
        self.requests.append((path, body))
        return {"ready": True} if body is None else {"predictions": [3]}

    def list_pods(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        return []  # no predictor pods: the waits are fed their events (see get_deployment)

    def list_pods_versioned(self, namespace: str, label_selector: str | None = None) -> tuple[list[Any], str]:
        return [], "1"

    def watch_pods(self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: float):
        return iter(())

    def list_events(self, namespace: str, field_selector: str | None = None) -> list[dict[str, Any]]:
        return []

    def read_pod_log(self, namespace: str, pod: str, *args: Any, **kwargs: Any) -> str:
        return ""

    def read_pod_log_chunk(self, namespace: str, pod: str, container: str, request: Any) -> str:
        return ""


def operator(hook: FakeServingHook, **kwargs: Any) -> InferenceServiceOperator:
    op = InferenceServiceOperator(
        task_id="serve", name="digits", storage_uri=V2, model_format="pytorch", smoke_request=SMOKE, **kwargs
    )
    op.hook = lambda: hook  # type: ignore[method-assign]
    return op


def context(store: StateStore | None = None) -> dict[str, Any]:
    return {"ti": TaskInstance(task_id="serve"), "task_state_store": store if store is not None else StateStore()}


def deferred(op: InferenceServiceOperator, ctx: dict[str, Any]) -> TaskDeferred:
    with pytest.raises(TaskDeferred) as raised:
        op.execute(ctx)
    return raised.value


def event(status: str, uri: str = V2, **more: Any) -> dict[str, Any]:
    return RolloutEvent(status, "digits", "ns", uri, **more).to_payload()  # type: ignore[arg-type]


def test_a_first_publish_creates_waits_smoke_tests_and_returns_the_result():
    hook, ctx = FakeServingHook(), context()
    defer = deferred(operator(hook), ctx)
    assert [w[0] for w in hook.writes] == ["create"]
    assert (defer.trigger.name, defer.trigger.storage_uri, defer.method_name) == ("digits", V2, "execute_complete")
    result = operator(hook).execute_complete(ctx, event("serving", replicas=1, url="http://digits-ns.example.com"))
    assert result == {
        "name": "digits",
        "namespace": "ns",
        "url": "http://digits-ns.example.com",
        "storage_uri": V2,
        "previous_storage_uri": None,
        "mode": "Standard",
        "replicas": 1,
        "smoke_response": {"predictions": [3]},
        "smoke_classes": None,  # a reply that is not rows of scores is left as it is
    }
    assert hook.requests == [("v1/models/digits", None), ("v1/models/digits:predict", SMOKE)]


def test_an_update_patches_and_a_retry_of_it_writes_nothing_and_keeps_the_previous_uri():
    hook, store = FakeServingHook(isvc(V1)), StateStore()
    deferred(operator(hook), context(store))
    assert [w[0] for w in hook.writes] == ["patch"] and store["inference_service"]["previous_storage_uri"] == V1
    version = hook.stored["metadata"]["resourceVersion"]
    deferred(operator(hook), context(store))  # the retry: the spec is already so
    assert len(hook.writes) == 1 and hook.stored["metadata"]["resourceVersion"] == version
    result = operator(hook).execute_complete(context(store), event("serving"))
    assert result["previous_storage_uri"] == V1


def test_a_failed_model_rolls_back_and_the_task_fails_with_the_reason_and_the_rollback():
    hook, ctx = FakeServingHook(isvc(V1)), context()
    deferred(operator(hook), ctx)
    failure = event(
        "failed", reason="ModelLoadFailed", message="boom", pod="p", container="kserve-container", exit_code=1
    )
    with pytest.raises(TaskDeferred) as rollback:
        operator(hook).execute_complete(ctx, failure)
    assert rollback.value.trigger.storage_uri == V1 and rollback.value.method_name == "rollback_complete"
    assert hook.stored["spec"]["predictor"]["model"]["storageUri"] == V1
    with pytest.raises(
        AirflowException,
        match=r"ModelLoadFailed: boom \(pod p, container kserve-container, exit code 1\)"
        r"; rolled back to file:///models/v1, which serves again",
    ):
        operator(hook).rollback_complete(ctx, event("serving", V1), **rollback.value.kwargs)


def test_a_failed_smoke_request_is_a_failed_publish():
    hook, ctx = FakeServingHook(isvc(V1)), context()
    deferred(operator(hook), ctx)
    hook.call_service = lambda *a, **k: {"ready": False}  # type: ignore[method-assign]
    with pytest.raises(TaskDeferred) as rollback:
        operator(hook).execute_complete(ctx, event("serving"))
    assert "SmokeRequestFailed" in rollback.value.kwargs["failure"]


def test_without_a_previous_model_or_rollback_the_failure_is_raised_as_is():
    hook, ctx = FakeServingHook(), context()
    deferred(operator(hook), ctx)
    with pytest.raises(AirflowException, match="not rolled back: there is no previous model"):
        operator(hook).execute_complete(ctx, event("failed", reason="ProgressDeadlineExceeded"))
    hook, ctx = FakeServingHook(isvc(V1)), context()
    deferred(operator(hook, rollback_on_failure=False), ctx)
    with pytest.raises(AirflowException, match="rollback_on_failure is off"):
        operator(hook, rollback_on_failure=False).execute_complete(ctx, event("timeout", reason="RolloutTimeout"))


def test_canary_percent_is_refused_in_standard_mode_at_parse_time():
    with pytest.raises(SpecError, match="canary_percent: needs Knative mode"):
        InferenceServiceOperator(task_id="t", name="digits", storage_uri=V2, model_format="pytorch", canary_percent=10)
    with pytest.raises(SpecError, match="smoke_request"):
        InferenceServiceOperator(task_id="t", name="digits", storage_uri=V2, model_format="pytorch", smoke_request={})


def test_scaling_patches_only_what_differs_and_says_what_changed():
    stored = isvc(V1)
    stored["spec"]["predictor"]["maxReplicas"] = 4
    hook = FakeServingHook(stored)
    op = ScaleInferenceServiceOperator(task_id="up", name="digits", min_replicas=3, max_replicas=4)
    op.hook = lambda: hook  # type: ignore[method-assign]
    result = op.execute(context())
    assert result["changed"] == {"min_replicas": [1, 3]} and (result["min_replicas"], result["max_replicas"]) == (3, 4)
    assert hook.writes == [("patch", {"spec": {"predictor": {"minReplicas": 3}}})]
    assert op.execute(context())["changed"] == {} and len(hook.writes) == 1


def test_knative_mode_waits_for_a_new_revision_and_rolls_back_without_the_canary():
    stored = isvc(V1, mode="Knative")
    stored["status"]["components"] = {"predictor": {"latestCreatedRevision": "digits-predictor-00001"}}
    hook, ctx = FakeServingHook(stored), context()
    op = operator(hook, mode="Knative", canary_percent=10)
    defer = deferred(op, ctx)
    assert defer.trigger.knative == {"revision_before": "digits-predictor-00001", "percent": 10}
    assert hook.stored["spec"]["predictor"]["canaryTrafficPercent"] == 10
    with pytest.raises(TaskDeferred) as rollback:
        op.execute_complete(ctx, event("failed", reason="RevisionFailed"))
    assert rollback.value.trigger.knative["percent"] == 100
    assert hook.stored["spec"]["predictor"].get("canaryTrafficPercent") is None


def test_a_retry_of_a_knative_publish_already_live_adopts_it_and_rolls_nothing_back():
    from airflow_elastic.serving.knative import judge_knative

    stored = isvc(V1, mode="Knative")
    stored["status"]["components"] = {"predictor": {"latestCreatedRevision": "digits-predictor-00001"}}
    hook, store = FakeServingHook(stored), StateStore()
    deferred(operator(hook, mode="Knative"), context(store))
    # Knative rolled the new model out as revision 2, which serves all traffic: then the try failed (the race).
    live = {"latestCreatedRevision": "digits-predictor-00002", "latestReadyRevision": "digits-predictor-00002"}
    live["traffic"] = [{"latestRevision": True, "percent": 100, "revisionName": "digits-predictor-00002"}]
    hook.stored["status"]["components"] = {"predictor": live}
    writes = len(hook.writes)
    retry = deferred(operator(hook, mode="Knative"), context(store))
    assert len(hook.writes) == writes  # no second rollout
    # It waits for what the first try waited for (revision 1 replaced), which the live revision 2 is: it serves at
    # once, instead of waiting for a revision after 2 that never comes and rolling the good model back on timeout.
    assert retry.trigger.knative == {"revision_before": "digits-predictor-00001", "percent": 100}
    verdict = judge_knative(hook.stored, name="digits", namespace="ns", storage_uri=V2, **retry.trigger.knative)
    assert verdict.status == "serving", verdict
    result = operator(hook, mode="Knative").execute_complete(context(store), event("serving"))
    assert (result["storage_uri"], result["previous_storage_uri"]) == (V2, V1)


def test_a_failed_wait_is_not_a_failed_model_nothing_is_rolled_back():
    hook, ctx = FakeServingHook(isvc(V1)), context()
    deferred(operator(hook), ctx)
    with pytest.raises(AirflowException, match="left as it is, and a retry of this task waits for it again"):
        operator(hook).execute_complete(ctx, event("error", message="5 looks in a row failed"))
    assert len(hook.writes) == 1 and hook.stored["spec"]["predictor"]["model"]["storageUri"] == V2


def test_the_hooks_and_the_fake_keep_the_protocols():
    from airflow_elastic.hooks.async_inference_service import AsyncInferenceServiceHook
    from airflow_elastic.hooks.inference_service import InferenceServiceHook
    from airflow_elastic.hooks.protocol import AsyncInferenceServiceHookProtocol, InferenceServiceHookProtocol

    assert isinstance(InferenceServiceHook("c"), InferenceServiceHookProtocol)
    assert isinstance(FakeServingHook(), InferenceServiceHookProtocol)
    assert isinstance(AsyncInferenceServiceHook("c"), AsyncInferenceServiceHookProtocol)


def test_a_custom_container_gets_the_smoke_request_without_a_readiness_probe():
    hook, ctx = FakeServingHook(), context()
    op = InferenceServiceOperator(
        task_id="serve", name="digits", storage_uri=V2, image="me/server:1", smoke_request=SMOKE
    )
    op.hook = lambda: hook  # type: ignore[method-assign]
    deferred(op, ctx)
    assert op.execute_complete(ctx, event("serving"))["smoke_response"] == {"predictions": [3]}
    assert hook.requests == [("v1/models/digits:predict", SMOKE)]


def test_a_reply_of_logit_rows_is_decoded_to_the_predicted_class_of_each_row_in_the_result_and_the_log():
    from tests.support.operator_fakes import Logger

    logits = {"predictions": [[0.1, 2.5, -1.0], [3.0, 0.2, 0.1]]}
    hook, ctx = FakeServingHook(), context()
    hook.call_service = lambda namespace, service, path, body=None: {"ready": True} if body is None else logits
    deferred(operator(hook), ctx)
    op = operator(hook)
    op._cached_logger = Logger()
    result = op.execute_complete(ctx, event("serving", replicas=1))
    assert (result["smoke_classes"], result["smoke_response"]) == ([1, 0], logits)
    [answered] = [line for line in op._cached_logger.lines if line.startswith("Smoke request")]
    assert "predicted classes [1, 0]" in answered and "[0.1, 2.5, -1.0]" in answered
