"""The worker's I/O for a group on another backend: a TrainJob or PyTorchJob seen through the JobSet hook's methods.

``TrainingGroupOperator(backend="trainjob" | "pytorchjob")`` hands :class:`BackendHook` to the same code that
submits, adopts, waits for and resubmits JobSets (``identity``, ``resubmission``, ``waiting``): ``create_jobset``
creates the backend's object, ``get_jobset`` reads it as the JobSet-shaped view the watch judges
(:func:`airflow_elastic.waiting.backend_watch.view`; a TrainJob with its JobSet, and while that JobSet does not exist
the
events that would carry a build error), ``patch_jobset`` saves the evidence on it, ``delete_jobset`` deletes it, and
the group's pods come labelled as a JobSet's. Everything else (events, nodes, logs) is the JobSet hook's.

Before a TrainJob is created, :meth:`BackendHook.preflight` checks the cluster: the installed TrainJob CRD is the
Trainer version the renderer targets (``backends.trainjob_crd_problem``, read once per hook), and the runtime exists,
as a ``TrainingRuntime`` of the namespace, else a ``ClusterTrainingRuntime`` (that order: a namespace's own runtime
of that name is the more specific one). A PyTorchJob needs its CRD installed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_elastic.hooks.errors import NotFound
from airflow_elastic.training.state import JOBSET_NAME_LABEL
from airflow_elastic.waiting import backend_watch as bw


class BackendUnavailable(AirflowFailException):
    """The cluster cannot run the group on its backend (CRD missing or of another version, runtime missing); a retry
    would fail the same way, so the task fails at once."""


class BackendHook:
    """:class:`~airflow_elastic.hooks.protocol.JobSetHookProtocol` over a TrainJob's or PyTorchJob's objects.

    Args:
        hook: the worker's ``TrainingGroupHook`` (JobSets, TrainJobs and PyTorchJobs, pods, nodes, CRDs).
        backend: ``trainjob`` or ``pytorchjob``.
        roles: the group's role names, leader first (a PyTorchJob's Master, then its Worker).
    """

    def __init__(self, hook: Any, backend: str, roles: Sequence[str] = ()) -> None:
        self.hook = hook
        self.backend = backend
        self.objects = bw.objects(backend)
        self.roles = tuple(roles)

    def __getattr__(self, name: str) -> Any:
        # Events, nodes, logs, Jobs, the connection: the JobSet hook's own.
        return getattr(self.hook, name)

    # ------------------------------------------------------------------------------------------ pre-flight

    def preflight(self, namespace: str, runtime: str | None = None) -> str | None:
        """Check that the cluster can run this backend's group; returns the runtime's kind (TrainJob only).

        Raises:
            BackendUnavailable: the CRD is missing or targets another version, or the runtime does not exist.
        """
        from airflow_elastic.training import backends

        crd = self.hook.get_crd(self.objects.crd)
        if crd is None:
            install = (
                f"Kubeflow Trainer {backends.TRAINER_VERSION}"
                if self.backend == bw.TRAINJOB
                else "the training-operator v1 (kubeflow/trainer release-1.9)"
            )
            raise BackendUnavailable(
                f"backend={self.backend!r}: the cluster has no {self.objects.kind} CRD ({self.objects.crd}); install "
                f"{install}, or use another backend"
            )
        if self.backend != bw.TRAINJOB:
            return None
        if problem := backends.trainjob_crd_problem(crd):
            raise BackendUnavailable(f"backend='trainjob': {problem}")
        for kind in bw.RUNTIME_KINDS:
            if self.hook.get_training_runtime(namespace, runtime, kind) is not None:
                return kind
        raise BackendUnavailable(
            f"runtime={runtime!r}: no TrainingRuntime {namespace}/{runtime} and no ClusterTrainingRuntime {runtime} "
            "exists; install it (the Trainer's default runtimes include torch-distributed) or name another"
        )

    # ----------------------------------------------------------------------------- the group's own object

    def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create the backend's object (a TrainJob or PyTorchJob) from its rendered ``body``."""
        return self.hook.create_training_job(self.objects.plural, namespace, body)

    def get_jobset(self, namespace: str, name: str) -> dict[str, Any]:
        """The backend's object as the JobSet-shaped view (raises ``NotFound`` when it does not exist)."""
        obj = self.hook.get_training_job(self.objects.plural, namespace, name)
        jobset = None
        if self.backend == bw.TRAINJOB:
            try:
                jobset = self.hook.get_jobset(namespace, name)
            except NotFound:
                jobset = None
        events = self.hook.list_events(namespace) if bw.wants_events(self.backend, obj, jobset) else ()
        # view is None only for a missing object; get_training_job raised NotFound for one.
        return bw.view(self.backend, obj, jobset=jobset, events=events, roles=self.roles)  # type: ignore[return-value]

    def patch_jobset(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch the backend's object (the saved evidence lives on it, as on a JobSet)."""
        return self.hook.patch_training_job(self.objects.plural, namespace, name, patch)

    def delete_jobset(self, namespace: str, name: str, propagation: str = "Foreground") -> dict[str, Any] | None:
        """Delete the backend's object; its controller deletes what it created."""
        return self.hook.delete_training_job(self.objects.plural, namespace, name, propagation)

    def list_pods(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """Pods; a JobSet's pod selector (``jobset-name=<name>``, as ``waiting.group_pods`` asks) is answered with
        the backend's pods of that name, labelled as a JobSet's."""
        key, _, name = (label_selector or "").partition("=")
        if key != JOBSET_NAME_LABEL or not name:
            return self.hook.list_pods(namespace, label_selector)
        pods = self.hook.list_pods(namespace, f"{self.objects.pod_label}={name}")
        return bw.group_pods(self.backend, pods, name, self.roles)
