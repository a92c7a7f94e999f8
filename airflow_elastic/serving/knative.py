"""The rollout verdict in Knative mode (pure): the new revision is ready and holds its share of the traffic.

Knative names a revision per spec change; KServe copies the predictor's ``latestCreatedRevision``,
``latestReadyRevision`` and ``traffic`` from the Knative Service (kserve/kserve ``PropagateStatus``). The new model
serves when a revision other than the one seen before the patch was created, is the latest ready one, the
``latestRevision: true`` traffic entry has the intended percent (``canaryTrafficPercent``, else 100; upstream ignores
a canary on the very first rollout, when there is no rolled-out revision), the isvc is ``Ready`` and its model
``Loaded``. It failed when ``PredictorReady`` is ``False`` (Knative reports a failing revision as ``False``, a
progressing one as ``Unknown``) or KServe reports ``BlockedByFailedLoad``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_elastic.serving.rollout import RolloutEvent, Status, condition


@dataclass(frozen=True)
class Knative:
    """What a Knative-mode wait needs beyond the isvc: the revision seen before the patch, the intended percent."""

    revision_before: str = ""
    percent: int = 100

    def as_kwargs(self) -> dict[str, Any]:
        """These settings as :func:`judge_knative`'s keyword arguments (what the trigger serializes too)."""
        return {"revision_before": self.revision_before, "percent": self.percent}


def predictor_status(isvc: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The predictor's ``status.components.predictor`` (empty before KServe reports it)."""
    return (((isvc or {}).get("status") or {}).get("components") or {}).get("predictor") or {}


def latest_created(isvc: Mapping[str, Any] | None) -> str:
    """The predictor's ``latestCreatedRevision`` (``""`` before the first), recorded before a patch."""
    return str(predictor_status(isvc).get("latestCreatedRevision") or "")


def judge_knative(
    isvc: Mapping[str, Any] | None,
    *,
    name: str,
    namespace: str,
    storage_uri: str,
    revision_before: str,
    percent: int,
) -> RolloutEvent:
    """Whether the Knative-mode InferenceService ``name`` serves ``storage_uri`` from a new revision."""

    def event(status: Status, reason: str = "", message: str = "", **more: Any) -> RolloutEvent:
        return RolloutEvent(status, name, namespace, storage_uri, reason, message, **more)

    if isvc is None:
        return event("missing", "NotFound", f"InferenceService {namespace}/{name} does not exist")
    status = isvc.get("status") or {}
    model = status.get("modelStatus") or {}
    if model.get("transitionStatus") == "BlockedByFailedLoad":
        info = model.get("lastFailureInfo") or {}
        code = info.get("exitCode")
        exit_code = int(code) if code is not None else None
        return event(
            "failed", str(info.get("reason") or "ModelLoadFailed"), str(info.get("message") or ""), exit_code=exit_code
        )
    ready = condition(isvc, "PredictorReady")
    if ready.get("status") == "False":
        return event("failed", str(ready.get("reason") or "RevisionFailed"), str(ready.get("message") or ""))
    predictor = predictor_status(isvc)
    created, latest_ready = latest_created(isvc), str(predictor.get("latestReadyRevision") or "")
    traffic: Mapping[str, Any] = next((t for t in predictor.get("traffic") or [] if t.get("latestRevision")), {})
    first = not revision_before
    waits = (
        (created in ("", revision_before), f"Knative has not created a revision after {revision_before or 'none'}"),
        (created != latest_ready, f"revision {created} is not ready (latest ready: {latest_ready or 'none'})"),
        (
            not first and int(traffic.get("percent") or 0) != percent,
            f"the latest revision has {traffic.get('percent')}% of the traffic, not {percent}%",
        ),
        (condition(isvc, "Ready").get("status") != "True", "the InferenceService is not Ready"),
        (((model.get("states") or {}).get("activeModelState")) != "Loaded", "the model is not Loaded"),
    )
    for unmet, why in waits:
        if unmet:
            return event("waiting", message=why)
    return event("serving", url=str(status.get("url") or ""))  # replicas: Knative scales by traffic
