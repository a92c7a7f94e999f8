"""Is the new model serving? The rollout verdict of an InferenceService from what the cluster shows (pure).

:func:`judge` is called with the InferenceService, its predictor Deployment and that Deployment's pods, by the
operator's sync wait and by :class:`~airflow_elastic.triggers.inference_service.InferenceServiceTrigger` alike, and
answers one :class:`RolloutEvent`. ``Ready`` alone is not enough in Standard mode: KServe derives ``PredictorReady``
from the Deployment's ``Available`` condition, which the old pods keep True through a rolling update, so the isvc
stays Ready while the new model is still loading, or crashing (``docs/serving.md``). The new model serves when the
Deployment's pod template carries the new storage URI, the Deployment controller has observed that generation, every
replica is updated and available, ``Progressing`` says ``NewReplicaSetAvailable``, the isvc is Ready and its model
``Loaded``. It has failed when a new pod's ``storage-initializer`` or ``kserve-container`` failed the way KServe's
status reconciler calls ``ModelLoadFailed``, when KServe reports ``BlockedByFailedLoad``, or when the Deployment's
progress deadline passed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

from airflow_elastic.kube.labels import STORAGE_SOURCE_URI_ANNOTATION
from airflow_elastic.kube.names import PREDICTOR_CONTAINER, STORAGE_INITIALIZER_CONTAINER
from airflow_elastic.serving import inference_service as serving

# Under the names this module exported before kube.labels and kube.names.
SOURCE_URI_ANNOTATION = STORAGE_SOURCE_URI_ANNOTATION
STORAGE_INITIALIZER = STORAGE_INITIALIZER_CONTAINER
Status = Literal["waiting", "serving", "failed", "missing", "timeout", "error"]


@dataclass(frozen=True)
class RolloutEvent:
    """One look at a rollout; also the trigger's payload.

    Attributes:
        status: ``waiting``, ``serving`` (the new model serves), ``failed``, ``missing`` (no such isvc),
            ``timeout`` (the wait's deadline passed), ``error`` (waiting itself failed).
        reason, message: upstream's reason (``ModelLoadFailed``, ``ProgressDeadlineExceeded``) and its message; for
            ``waiting``, what is awaited.
        pod, container, exit_code: the failing pod and container, and the exit code it ended with.
        log_tail: the last lines of that container's log (filled in by the waiter, which can read logs).
        replicas: available replicas of the new model; url: where it is served.
    """

    status: Status
    name: str
    namespace: str
    storage_uri: str
    reason: str = ""
    message: str = ""
    pod: str = ""
    container: str = ""
    exit_code: int | None = None
    log_tail: str = ""
    replicas: int = 0
    url: str = ""

    def to_payload(self) -> dict[str, Any]:
        """The event as primitives (a trigger event's payload)."""
        return asdict(self)

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> RolloutEvent:
        """The event a :meth:`to_payload` made (unknown keys ignored: a newer triggerer's)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in payload.items() if k in known})

    @property
    def finished(self) -> bool:
        """The wait is over (anything but ``waiting``)."""
        return self.status != "waiting"

    def describe(self) -> str:
        """The failure in the user's terms: reason, message, where, exit code and log tail."""
        text = f"{self.reason}: {self.message}".strip(": ") or self.status
        if self.pod:
            text += f" (pod {self.pod}" + (f", container {self.container}" if self.container else "")
            text += f", exit code {self.exit_code})" if self.exit_code is not None else ")"
        # The termination message is usually the log's last line: show only what it does not say already.
        tail = [line for line in self.log_tail.splitlines() if line.strip() and line.strip() not in text]
        if tail:
            text += "; log tail:\n" + "\n".join(tail)
        return text


def deployment_name(isvc_name: str) -> str:
    """The Standard-mode predictor Deployment (and Service) of an InferenceService: ``<isvc>-predictor``."""
    return f"{isvc_name}-predictor"


def selector(deployment: Mapping[str, Any]) -> str | None:
    """The Deployment's pod selector as a label selector string (``matchLabels`` only, as KServe writes it)."""
    labels = (((deployment.get("spec") or {}).get("selector")) or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or None


def pod_storage_uri(pod_or_template: Mapping[str, Any]) -> str | None:
    """The storage URI a pod (or a pod template) was made for: KServe's source-URI annotation, else the predictor
    container's ``STORAGE_URI``."""
    annotations = (pod_or_template.get("metadata") or {}).get("annotations") or {}
    if annotations.get(STORAGE_SOURCE_URI_ANNOTATION):
        return str(annotations[STORAGE_SOURCE_URI_ANNOTATION])
    return serving.container_storage_uri(((pod_or_template.get("spec") or {}).get("containers")) or [])


def pod_failure(pod: Mapping[str, Any]) -> tuple[str, int, str] | None:
    """``(container, exit code, message)`` when the pod's model failed to load, as KServe's status reconciler
    decides it (kserve/kserve ``StatusReconciler.checkContainerStatuses`` / ``safeGetTerminationMessage``):
    ``storage-initializer`` or ``kserve-container`` terminated with an error, or waiting in ``CrashLoopBackOff``
    after one."""
    status = pod.get("status") or {}
    watched = [
        *(
            (cs, True)
            for cs in status.get("initContainerStatuses") or []
            if cs.get("name") == STORAGE_INITIALIZER_CONTAINER
        ),
        *((cs, False) for cs in status.get("containerStatuses") or [] if cs.get("name") == PREDICTOR_CONTAINER),
    ]
    for cs, _ in watched:
        state = cs.get("state") or {}
        ended = state.get("terminated")
        if not ended and (state.get("waiting") or {}).get("reason") == "CrashLoopBackOff":
            ended = (cs.get("lastState") or {}).get("terminated")
        if ended and int(ended.get("exitCode") or 0) != 0:
            message = ended.get("message") or ended.get("reason") or "Error"
            return str(cs.get("name")), int(ended["exitCode"]), str(message).strip()
    return None


def condition(obj: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any]:
    """The status condition of type ``kind`` (``{}`` when absent)."""
    c: Mapping[str, Any]
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return {}


def judge(
    isvc: Mapping[str, Any] | None,
    deployment: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    *,
    name: str,
    namespace: str,
    storage_uri: str,
) -> RolloutEvent:
    """Whether the Standard-mode InferenceService ``name`` serves ``storage_uri`` yet (see the module docstring).

    Args:
        isvc: the InferenceService (``None``: not found).
        deployment: its predictor Deployment (``None``: not created yet).
        pods: the Deployment's pods (old and new).
    """

    def event(status: Status, reason: str = "", message: str = "", **more: Any) -> RolloutEvent:
        return RolloutEvent(status, name, namespace, storage_uri, reason, message, **more)

    if isvc is None:
        return event("missing", "NotFound", f"InferenceService {namespace}/{name} does not exist")
    template = ((deployment or {}).get("spec") or {}).get("template") or {}
    if deployment is None or pod_storage_uri(template) != storage_uri:
        blocked = _blocked(isvc)
        if blocked is not None and deployment is None:
            return blocked(event)
        return event("waiting", message=f"KServe has not rolled {storage_uri} into Deployment {deployment_name(name)}")
    for pod in _live(pods):
        if pod_storage_uri(pod) != storage_uri:
            continue
        failure = pod_failure(pod)
        if failure is not None:
            container, code, message = failure
            return event(
                "failed",
                "ModelLoadFailed",
                message,
                pod=str((pod.get("metadata") or {}).get("name") or ""),
                container=container,
                exit_code=code,
            )
    blocked = _blocked(isvc)
    live = _live(pods)
    if blocked is not None and all(pod_storage_uri(p) == storage_uri for p in live) and not any(map(_ready, live)):
        # KServe judges its newest pod only, and its status may lag a pod's deletion: trusted while only pods of
        # this model are left and none of them is Ready (after a rollback, the old model's pods are).
        return blocked(event)
    for failed in (
        _false(deployment, "Progressing"),
        _true(deployment, "ReplicaFailure"),
        _false(isvc, "PredictorReady", ("ProgressDeadlineExceeded",)),
    ):
        if failed:
            return event("failed", str(failed.get("reason") or "RolloutFailed"), str(failed.get("message") or ""))
    return _progress(isvc, deployment, event)


def _progress(
    isvc: Mapping[str, Any], deployment: Mapping[str, Any], event: Callable[..., RolloutEvent]
) -> RolloutEvent:
    """``serving`` when every freshness rule holds, else ``waiting`` naming the first that does not."""
    meta, status = deployment.get("metadata") or {}, deployment.get("status") or {}
    generation, observed = int(meta.get("generation") or 0), int(status.get("observedGeneration") or 0)
    replicas = int(status.get("replicas") or 0)
    updated, available = int(status.get("updatedReplicas") or 0), int(status.get("availableReplicas") or 0)
    desired = (deployment.get("spec") or {}).get("replicas")
    progressing = condition(deployment, "Progressing").get("reason")
    model = ((isvc.get("status") or {}).get("modelStatus") or {}).get("states") or {}
    waits = (
        (observed < generation, f"the Deployment controller has observed generation {observed} of {generation}"),
        (
            not (updated == available == replicas >= max(int(desired or 1), 1)),
            f"{updated} updated, {available} available of {replicas} replicas (desired {desired})",
        ),
        (progressing != "NewReplicaSetAvailable", f"the Deployment is Progressing with reason {progressing!r}"),
        (condition(isvc, "Ready").get("status") != "True", "the InferenceService is not Ready"),
        (model.get("activeModelState") != "Loaded", f"the active model is {model.get('activeModelState')!r}"),
    )
    for unmet, why in waits:
        if unmet:
            return event("waiting", message=why)
    status_ = isvc.get("status") or {}
    url = status_.get("url") or ((status_.get("address") or {}).get("url")) or ""
    return event("serving", replicas=available, url=str(url))


def _blocked(isvc: Mapping[str, Any]) -> Callable[[Callable[..., RolloutEvent]], RolloutEvent] | None:
    """KServe's own verdict ``BlockedByFailedLoad`` (``lastFailureInfo``), as an event maker, or ``None``."""
    model = (isvc.get("status") or {}).get("modelStatus") or {}
    if model.get("transitionStatus") != "BlockedByFailedLoad":
        return None
    info = model.get("lastFailureInfo") or {}

    def make(event: Callable[..., RolloutEvent]) -> RolloutEvent:
        code = info.get("exitCode")
        return event(
            "failed",
            str(info.get("reason") or "ModelLoadFailed"),
            str(info.get("message") or "the model failed to load"),
            exit_code=int(code) if code is not None else None,
        )

    return make


def _live(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pods not being deleted."""
    return [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]


def _ready(pod: Mapping[str, Any]) -> bool:
    return condition(pod, "Ready").get("status") == "True"


def _false(obj: Mapping[str, Any], kind: str, reasons: Sequence[str] = ()) -> Mapping[str, Any] | None:
    found = condition(obj, kind)
    if found.get("status") == "False" and (not reasons or found.get("reason") in reasons):
        return found
    return None


def _true(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    found = condition(obj, kind)
    return found if found.get("status") == "True" else None


def with_log_tail(event: RolloutEvent, tail: str) -> RolloutEvent:
    """``event`` with the failing container's log tail (trailing blank lines dropped)."""
    return replace(event, log_tail=tail.rstrip())
