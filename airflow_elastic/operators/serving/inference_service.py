"""Publishing to KServe: ``InferenceServiceOperator`` rolls a model out and waits until it serves (or rolls back);
``ScaleInferenceServiceOperator`` sets the replica bounds on a schedule.

The body, the patches and the argument rules are :mod:`airflow_elastic.serving.inference_service`'s, the rollout
verdict is
:func:`airflow_elastic.serving.rollout.judge`'s (the trigger and the sync wait call it alike); the operators only send
and
wait. ``docs/serving.md`` explains the rollout check and why ``Ready`` is not enough.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from airflow_elastic.operators.assets import annotate
from airflow_elastic.operators.links import ServedEndpointLink
from airflow_elastic.serving import inference_service as serving
from airflow_elastic.training.spec import SpecError
from airflow_elastic.waiting.outage import DEFAULT_API_OUTAGE_TOLERANCE

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_elastic.hooks.inference_service import InferenceServiceHook
    from airflow_elastic.operators.identity import StateStore
    from airflow_elastic.serving.knative import Knative
    from airflow_elastic.serving.rollout import RolloutEvent

#: ``task_state_store`` key: ``{name, namespace, storage_uri, previous_storage_uri, revision_before}`` of this task's
#: publish (``revision_before``: Knative mode, the latest revision before it was written).
STATE_KEY = "inference_service"
#: What a served model's asset events carry (the keys of the result that say what serves, and where).
SERVED_EXTRA = ("name", "namespace", "url", "storage_uri", "previous_storage_uri", "mode")


class _ServingOperator(BaseOperator):
    """The connection, namespace and hook both operators share."""

    namespace: str | None
    kubernetes_conn_id: str

    def hook(self) -> InferenceServiceHook:
        """The blocking serving hook of ``kubernetes_conn_id`` (imports the Kubernetes client on first use)."""
        from airflow_elastic.hooks.inference_service import InferenceServiceHook

        return InferenceServiceHook(self.kubernetes_conn_id)

    def _namespace(self, hook: InferenceServiceHook) -> str:
        return self.namespace or hook.get_namespace() or "default"


class InferenceServiceOperator(_ServingOperator):
    """Create or update (merge patch) a KServe InferenceService to serve ``storage_uri``; wait until the *new* model
    serves; optionally smoke-test it; on failure roll back to the previous model.

    Args:
        name: the InferenceService (``^[a-z]([-a-z0-9]*[a-z0-9])?$``, at most 53 characters).
        storage_uri: the model's location (templated): ``gs://``, ``s3://``, ``pvc://``, ``file://``, a path ...
        model_format: a KServe model format (``"pytorch"``, ``"sklearn"`` ...); or give ``image`` (and
            ``command``/``args``) for a custom predictor container, which gets the URI as ``STORAGE_URI``.
        min_replicas, max_replicas, scale_metric, scale_target: the predictor's autoscaling (Standard mode: an HPA on
            ``cpu``/``memory`` utilisation %).
        canary_percent: Knative mode only (``canaryTrafficPercent``); refused in Standard mode, where KServe would
            ignore it silently.
        mode: ``"Standard"`` (default) or ``"Knative"``; always written as the deployment-mode annotation.
        smoke_request: a v1 ``{"instances": [...]}`` or v2 ``{"inputs": [...]}`` request (templated), POSTed to the
            new model through its Service before the step succeeds; its reply is in the result.
        rollback_on_failure: when the new model fails, restore the previous ``storageUri`` and wait until it serves
            again; the task then fails with the original reason and ``rolled back to ...``.
        namespace: target namespace (templated); default: the connection's ``namespace`` extra, else ``default``.
        kubernetes_conn_id: a ``kubernetes`` connection with an explicit cluster (templated).
        deferrable: wait in the triggerer (default) instead of on the worker.
        poll_interval: seconds between looks.
        rollout_timeout: seconds the new model (and a rollback) may take to serve.
        api_outage_tolerance: seconds of Kubernetes API failures in a row (5xx, 429, no reply) the wait rides out
            before the task fails (default 300; see ``TrainingGroupOperator``).

    Returns (XCom ``return_value``):
        ``{"name", "namespace", "url", "storage_uri", "previous_storage_uri", "mode", "replicas", "smoke_response",
        "smoke_classes"}``; ``smoke_classes`` is the predicted class (argmax) of each row when the reply is rows of
        scores (logits), else ``None``. The URL is also the task's extra link "Served endpoint" in the UI. When the
        new model serves, the events of the task's ``Asset`` outlets get ``name``, ``namespace``, ``url``,
        ``storage_uri``, ``previous_storage_uri`` and ``mode`` in their extra; a failed or rolled-back rollout fails
        the task, which emits none.

    Raises:
        SpecError: a bad argument (at parse time), or the stored InferenceService is served in another mode.
        AirflowException: the new model failed (reason, message, pod, exit code, log tail), the smoke request
            failed, or the wait timed out; says whether it rolled back.
    """

    template_fields: Sequence[str] = ("storage_uri", "smoke_request", "namespace", "kubernetes_conn_id")
    operator_extra_links = (ServedEndpointLink(),)
    ui_color = "#fdf2e9"

    def __init__(
        self,
        *,
        name: str,
        storage_uri: str,
        model_format: str | None = None,
        image: str | None = None,
        command: Sequence[str] = (),
        args: Sequence[str] = (),
        min_replicas: int | None = 1,
        max_replicas: int | None = None,
        scale_metric: str | None = None,
        scale_target: int | None = None,
        canary_percent: int | None = None,
        mode: str = "Standard",
        smoke_request: Mapping[str, Any] | None = None,
        rollback_on_failure: bool = True,
        namespace: str | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        deferrable: bool = True,
        poll_interval: float = 5.0,
        rollout_timeout: float = 600.0,
        api_outage_tolerance: float = DEFAULT_API_OUTAGE_TOLERANCE,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        problems = serving.name_problems(name)
        if not isinstance(storage_uri, str) or not storage_uri.strip():
            problems.append(("storage_uri", f"must be a non-empty URI or template, got {storage_uri!r}"))
        if smoke_request is not None and not _templated(smoke_request):
            try:
                serving.smoke_protocol(smoke_request)
            except SpecError as error:
                problems.extend(error.problems)
        if not (isinstance(rollout_timeout, int | float) and rollout_timeout > 0):
            problems.append(("rollout_timeout", f"must be seconds > 0, got {rollout_timeout!r}"))
        try:
            self.predictor = serving.Predictor(
                model_format=model_format,
                image=image,
                command=command,
                args=args,
                min_replicas=min_replicas,
                max_replicas=max_replicas,
                scale_metric=scale_metric,
                scale_target=scale_target,
                canary_percent=canary_percent,
                mode=mode,
            )
        except SpecError as error:
            problems.extend(error.problems)
        if problems:
            raise SpecError(problems)
        self.name = name
        self.storage_uri = storage_uri
        self.smoke_request = smoke_request
        self.rollback_on_failure = rollback_on_failure
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.deferrable = deferrable
        self.poll_interval = float(poll_interval)
        self.api_outage_tolerance = float(api_outage_tolerance)
        self.rollout_timeout = float(rollout_timeout)

    # ------------------------------------------------------------------------------------------- execute

    def execute(self, context: Context) -> dict[str, Any]:
        """Create or patch the InferenceService (nothing when it already is so), then wait for the new model."""
        uri = str(self.storage_uri).strip()
        if not uri:
            raise SpecError([("storage_uri", f"rendered empty from {self.storage_uri!r}")])
        hook = self.hook()
        namespace = self._namespace(hook)
        store = context["task_state_store"]
        record = store.get(STATE_KEY)
        current = hook.get_inference_service(namespace, self.name)
        knative = self._knative(current, self.predictor, _retried(record, uri, current))
        previous = self._write(hook, namespace, uri, record, current)
        revision = knative.revision_before if knative else ""
        store.set(
            STATE_KEY,
            {
                "name": self.name,
                "namespace": namespace,
                "storage_uri": uri,
                "previous_storage_uri": previous,
                "revision_before": revision,
            },
        )
        return self._wait(context, hook, namespace, uri, "execute_complete", {}, knative)

    def _knative(
        self, current: Mapping[str, Any] | None, predictor: serving.Predictor, retried: Mapping[str, Any] | None = None
    ) -> Knative | None:
        """In Knative mode, what its wait compares with: the revision before this write (for a retry of this
        publish, the one before the first try wrote it: the live revision is this model's), the intended percent."""
        if predictor.mode != "Knative":
            return None
        from airflow_elastic.serving.knative import Knative, latest_created

        if retried is not None and "revision_before" in retried:
            before = str(retried["revision_before"] or "")
        else:
            before = latest_created(current)
        return Knative(before, 100 if predictor.canary_percent is None else predictor.canary_percent)

    def _write(
        self, hook: InferenceServiceHook, namespace: str, uri: str, record: Any, current: dict[str, Any] | None
    ) -> str | None:
        """Create or merge-patch; the storage URI served before (``None``: a first publish)."""
        from airflow_elastic.hooks.errors import AlreadyExists

        if current is None:
            try:
                hook.create_inference_service(namespace, serving.render(self.name, namespace, uri, self.predictor))
                self.log.info("Created InferenceService %s/%s serving %s", namespace, self.name, uri)
                return None
            except AlreadyExists:  # made in between (a lost reply): patch it like any other
                current = hook.get_inference_service(namespace, self.name) or {}
        previous = serving.storage_uri_of(current)
        if _retried(record, uri, current):
            previous = record.get("previous_storage_uri")  # a retry of this publish: what it replaced
        patch = serving.update_patch(current, uri, self.predictor)
        if patch is None:
            self.log.info("InferenceService %s/%s already has this spec: nothing written", namespace, self.name)
        else:
            hook.patch_inference_service(namespace, self.name, patch)
            self.log.info("Patched InferenceService %s/%s: %s -> %s", namespace, self.name, previous, uri)
        return previous

    def _wait(
        self,
        context: Context,
        hook: InferenceServiceHook,
        namespace: str,
        uri: str,
        method: str,
        extra: dict[str, Any],
        knative: Knative | None,
    ) -> dict[str, Any]:
        """Defer (then ``method`` resumes) or wait here, for ``uri`` to serve."""
        deadline = time.time() + self.rollout_timeout
        if self.deferrable:
            from airflow_elastic.triggers.inference_service import InferenceServiceTrigger

            trigger = InferenceServiceTrigger(
                self.name,
                namespace,
                uri,
                self.kubernetes_conn_id,
                poll_interval=self.poll_interval,
                deadline=deadline,
                connection_extras=hook.get_connection_extras(),
                knative=None if knative is None else knative.as_kwargs(),
                api_outage_tolerance=self.api_outage_tolerance,
            )
            # Past the trigger's own deadline, so its "timeout" event (which may roll back) comes first.
            timeout = datetime.timedelta(seconds=self.rollout_timeout + max(60, 2 * self.poll_interval))
            from airflow_elastic.operators import deferral

            deferral.defer(self, trigger, method_name=method, kwargs=extra, timeout=timeout)
        from airflow_elastic.operators.serving.waiting import wait_for_rollout

        event = wait_for_rollout(
            hook,
            namespace,
            self.name,
            uri,
            poll_interval=self.poll_interval,
            deadline=deadline,
            log=self.log,
            knative=knative,
            api_outage_tolerance=self.api_outage_tolerance,
        )
        return getattr(self, method)(context, event.to_payload(), **extra)

    def execute_complete(self, context: Context, event: Mapping[str, Any]) -> dict[str, Any]:
        """The new model's rollout ended: smoke-test it and return the result, or roll back and fail."""
        from airflow_elastic.serving.rollout import RolloutEvent

        verdict = RolloutEvent.from_payload(event)
        where = f"InferenceService {verdict.namespace}/{self.name}"
        if verdict.status == "error":  # the wait failed, not the model: leave it, a retry waits again (no write)
            raise AirflowException(
                f"{where}: waiting for {verdict.storage_uri} to serve failed ({verdict.message}); the service was "
                "left as it is, and a retry of this task waits for it again"
            )
        hook = self.hook()
        failure = None if verdict.status == "serving" else verdict.describe()
        if failure is None:
            try:
                response = self._smoke(hook, verdict.namespace)
            except Exception as error:  # any reply but a prediction fails the publish, with it as the reason
                failure = f"SmokeRequestFailed: {error}"
            else:
                return self._result(context, verdict, response)
        self.log.error("The new model %s of %s did not go live: %s", verdict.storage_uri, self.name, failure)
        store: StateStore = context["task_state_store"]
        previous = (store.get(STATE_KEY) or {}).get("previous_storage_uri")
        if verdict.status == "missing":
            raise AirflowException(f"{where}: {failure} (not rolled back: it is gone)")
        if not self.rollback_on_failure:
            raise AirflowException(f"{where}: {failure} (not rolled back: rollback_on_failure is off)")
        if not previous or previous == verdict.storage_uri:
            raise AirflowException(f"{where}: {failure} (not rolled back: there is no previous model)")
        return self._roll_back(context, hook, verdict.namespace, previous, failure)

    def _roll_back(
        self, context: Context, hook: InferenceServiceHook, namespace: str, previous: str, failure: str
    ) -> dict[str, Any]:
        """Merge-patch ``previous`` back, then wait for it (``rollback_complete`` fails the task either way)."""
        current = hook.get_inference_service(namespace, self.name) or {}
        back = dataclasses.replace(self.predictor, canary_percent=None)  # Knative: the old model takes all traffic
        patch = serving.update_patch(current, previous, back)
        if patch is not None:
            hook.patch_inference_service(namespace, self.name, patch)
        self.log.warning("Rolling %s back to %s", self.name, previous)
        knative = self._knative(current, back)
        return self._wait(context, hook, namespace, previous, "rollback_complete", {"failure": failure}, knative)

    def rollback_complete(self, context: Context, event: Mapping[str, Any], failure: str) -> dict[str, Any]:
        """The rollback's wait ended: fail with the original reason, saying whether the old model serves again."""
        from airflow_elastic.serving.rollout import RolloutEvent

        verdict = RolloutEvent.from_payload(event)
        where = f"InferenceService {verdict.namespace}/{self.name}"
        if verdict.status == "serving":
            raise AirflowException(f"{where}: {failure}; rolled back to {verdict.storage_uri}, which serves again")
        raise AirflowException(
            f"{where}: {failure}; rolling back to {verdict.storage_uri} failed too: {verdict.describe()}"
        )

    def _smoke(self, hook: InferenceServiceHook, namespace: str) -> Any:
        if self.smoke_request is None:
            return None
        import json

        from airflow_elastic.operators.serving.waiting import smoke

        request = json.loads(self.smoke_request) if isinstance(self.smoke_request, str) else self.smoke_request
        response = smoke(hook, namespace, self.name, request, model_server=bool(self.predictor.model_format))
        classes = serving.predicted_classes(response)
        decoded = f"predicted classes {classes}; " if classes is not None else ""
        self.log.info("Smoke request to %s answered: %sraw reply %s", self.name, decoded, str(response)[:500])
        return response

    def _result(self, context: Context, verdict: RolloutEvent, response: Any) -> dict[str, Any]:
        store: StateStore = context["task_state_store"]
        record = store.get(STATE_KEY) or {}
        self.log.info(
            "InferenceService %s/%s serves %s (%d replicas) at %s",
            verdict.namespace,
            self.name,
            verdict.storage_uri,
            verdict.replicas,
            verdict.url,
        )
        result = {
            "name": self.name,
            "namespace": verdict.namespace,
            "url": verdict.url,
            "storage_uri": verdict.storage_uri,
            "previous_storage_uri": record.get("previous_storage_uri"),
            "mode": self.predictor.mode,
            "replicas": verdict.replicas,
            "smoke_response": response,
            "smoke_classes": serving.predicted_classes(response),
        }
        annotate(self.outlets, context, {k: result[k] for k in SERVED_EXTRA}, self.log)
        return result


class ScaleInferenceServiceOperator(_ServingOperator):
    """Set an InferenceService's replica bounds (e.g. raise the floor before the day's traffic, lower it at night);
    patches only what differs, so a rerun writes nothing.

    Args:
        name: the InferenceService.
        min_replicas, max_replicas: the new bounds (``None``: leave that one); at least 1 each (Standard mode).
        namespace, kubernetes_conn_id: as for :class:`InferenceServiceOperator` (templated).

    Returns (XCom ``return_value``):
        ``{"name", "namespace", "min_replicas", "max_replicas", "changed"}``: the bounds now, and
        ``{argument: [old, new]}`` for what this run changed (``{}``: nothing).

    Raises:
        SpecError: bad bounds (at parse time). AirflowException: no such InferenceService.
    """

    template_fields: Sequence[str] = ("namespace", "kubernetes_conn_id")
    ui_color = "#fdf2e9"

    def __init__(
        self,
        *,
        name: str,
        min_replicas: int | None = None,
        max_replicas: int | None = None,
        namespace: str | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        problems = serving.name_problems(name) + serving.scale_problems(min_replicas, max_replicas)
        if problems:
            raise SpecError(problems)
        self.name = name
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        """Patch the bounds that differ (nothing when none do)."""
        hook = self.hook()
        namespace = self._namespace(hook)
        current = hook.get_inference_service(namespace, self.name)
        if current is None:
            raise AirflowException(f"InferenceService {namespace}/{self.name} does not exist: publish it first")
        patch, changed = serving.scale_patch(current, self.min_replicas, self.max_replicas)
        if patch is None:
            self.log.info("InferenceService %s/%s already has these bounds: nothing written", namespace, self.name)
        else:
            current = hook.patch_inference_service(namespace, self.name, patch)
            for field, (old, new) in changed.items():
                self.log.info("InferenceService %s/%s: %s %s -> %s", namespace, self.name, field, old, new)
        return {
            "name": self.name,
            "namespace": namespace,
            **serving.replicas_of(current),
            "changed": {field: [old, new] for field, (old, new) in changed.items()},
        }


def _retried(record: Any, uri: str, current: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """``record`` when this try retries its publish: the service already has ``uri``, which ``record`` wrote (a
    retry adopts that rollout: nothing is written, and the wait compares with what the first try saw)."""
    if current is None or serving.storage_uri_of(current) != uri:
        return None
    return record if isinstance(record, Mapping) and record.get("storage_uri") == uri else None


def _templated(value: Any) -> bool:
    """Whether ``value`` is (or holds at top level) a Jinja string, checked only once rendered."""
    return isinstance(value, str) and "{{" in value
