"""ClusterTrainingRuntime and TrainingRuntime admission (Kubeflow Trainer v2.3).

The CRD's pruning, defaults, schema and CEL rules (the JobSet template's own rules as in the JobSet CRD, under
``spec.template.spec``), then ``webhooks/trainingruntime_webhook.go`` ``validateReplicatedJobs``: a replicatedJob
with a trainer or initializer ancestor label runs one replica and has its container (``node``,
``dataset-initializer``, ``model-initializer``). The ClusterTrainingRuntime webhook validates creates and updates,
the TrainingRuntime webhook creates only, as upstream.
"""

from __future__ import annotations

from airflow_elastic.kube import schemas
from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.admission.common import Causes
from airflow_elastic.localcluster.admission.crd import CrdSchema, deny
from airflow_elastic.localcluster.admission.jobset import _cel_causes
from airflow_elastic.localcluster.admission.trainjob import TrainJobAdmission
from airflow_elastic.localcluster.resources import CLUSTERTRAININGRUNTIMES, TRAININGRUNTIMES, TRAINJOBS
from airflow_elastic.localcluster.store import Obj, Store
from airflow_elastic.localcluster.trainer import (
    ANCESTOR_LABEL,
    DATASET_INITIALIZER,
    GROUP,
    MODEL_INITIALIZER,
    NODE,
    TRAINER,
)

_CONTAINERS = {TRAINER: NODE, MODEL_INITIALIZER: MODEL_INITIALIZER, DATASET_INITIALIZER: DATASET_INITIALIZER}
_POLICIES = ("torch", "mpi", "jax", "xgboost", "flux")


def cel_causes(runtime: Obj, old: Obj | None) -> Causes:
    """The runtime CRD's ``x-kubernetes-validations``."""
    spec = runtime.get("spec") or {}
    policy = spec.get("mlPolicy") or {}
    causes: Causes = []
    if sum(key in policy for key in _POLICIES) > 1:
        message = 'Invalid value: "object": Only one of the policy can be configured'
        causes.append(errors.cause("spec.mlPolicy", message))
    for key, title in (("mpi", "mpiPolicy"), ("flux", "fluxPolicy")):
        if (policy.get(key) or {}).get("numProcPerNode", 1) < 1:
            message = f'Invalid value: "integer": NumProcPerNode in {title} must be >= 1'
            causes.append(errors.cause(f"spec.mlPolicy.{key}.numProcPerNode", message))
    for i, target in enumerate(((policy.get("torch") or {}).get("envInjection") or {}).get("targets") or []):
        if NODE in (target.get("containerNames") or []):
            message = (
                'Invalid value: "array": containerNames must not include the main node container because PET_* envs '
                "are always injected into it"
            )
            causes.append(errors.cause(f"spec.mlPolicy.torch.envInjection.targets[{i}].containerNames", message))
    template, old_template = spec.get("template") or {}, ((old or {}).get("spec") or {}).get("template") or {}
    for cause in _cel_causes(template.get("spec") or {}, old_template.get("spec") if old else None):
        causes.append({**cause, "field": "spec.template." + cause["field"]})
    return causes


def replicated_job_messages(runtime: Obj) -> list[str]:
    """``validateReplicatedJobs``."""
    messages = []
    path = "spec.template.spec.replicatedJobs"
    for i, rjob in enumerate(((runtime["spec"].get("template") or {}).get("spec") or {}).get("replicatedJobs") or []):
        step = (((rjob.get("template") or {}).get("metadata") or {}).get("labels") or {}).get(ANCESTOR_LABEL)
        if step not in _CONTAINERS:
            continue
        if rjob.get("replicas", 1) != 1:
            messages.append(f"{path}[{i}].replicas: Invalid value: {rjob.get('replicas')}: always must be 1")
        pod = ((rjob.get("template") or {}).get("spec") or {}).get("template") or {}
        if not any(c.get("name") == _CONTAINERS[step] for c in (pod.get("spec") or {}).get("containers") or []):
            messages.append(
                f"{path}[{i}].template.spec.template.spec.containers: Invalid value: []v1.Container{{...}}: "
                f"must contain the required container for the ancestor: {step}"
            )
    return messages


class RuntimeAdmission:
    """Admission of one of the two runtime kinds (``kind``: ``ClusterTrainingRuntime`` or ``TrainingRuntime``)."""

    def __init__(self, kind: str) -> None:
        cluster = kind == "ClusterTrainingRuntime"
        self.crd = CrdSchema(schemas.CLUSTER_TRAINING_RUNTIMES if cluster else schemas.TRAINING_RUNTIMES, kind, GROUP)
        self.webhook = f"validator.{kind.lower()}.trainer.kubeflow.org"
        self.validate_updates = cluster

    def _structural(self, runtime: Obj, old: Obj | None) -> None:
        self.crd.prune_and_default(runtime)
        causes = self.crd.causes(runtime) or cel_causes(runtime, old)
        if causes:
            raise self.crd.invalid(runtime, causes)

    def admit_create(self, obj: Obj) -> None:
        self._structural(obj, None)
        deny(self.webhook, replicated_job_messages(obj))

    def admit_update(self, obj: Obj, old: Obj) -> None:
        self._structural(obj, old)
        if self.validate_updates:
            deny(self.webhook, replicated_job_messages(obj))


def register(store: Store) -> None:
    """Install the Kubeflow Trainer plugins: TrainJobs and both runtime kinds."""
    store.admission[TRAINJOBS.key] = TrainJobAdmission(store)
    store.admission[CLUSTERTRAININGRUNTIMES.key] = RuntimeAdmission("ClusterTrainingRuntime")
    store.admission[TRAININGRUNTIMES.key] = RuntimeAdmission("TrainingRuntime")
