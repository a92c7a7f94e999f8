"""PyTorchJob (kubeflow.org/v1) admission: the CRD's structural schema, then training-operator's validating webhook.

There is no mutating webhook upstream (defaults are applied in-controller, see ``controllers/pytorchjobspec.py``).
The webhook is ported from kubeflow/trainer release-1.9 ``pkg/webhooks/pytorch/pytorchjob_webhook.go``
(``validatePyTorchJob``, ``validateSpec``, ``validatePyTorchReplicaSpecs``) and ``pkg/common/util/webhooks.go``
(``ValidateRunPolicyCreate``/``ValidateRunPolicyUpdate``). A denial is what controller-runtime makes of a plain
error (``admission.Denied``): 403 Forbidden, ``admission webhook "<name>" denied the request: <field errors>``.
Not ported: the admission warning for the deprecated ``elasticPolicy.nProcPerNode`` (the store has no warnings).
"""

from __future__ import annotations

from typing import Any

from airflow_elastic.kube import schemas
from airflow_elastic.localcluster.admission.common import dns1035_label
from airflow_elastic.localcluster.admission.crd import CrdSchema, deny
from airflow_elastic.localcluster.store import Obj

GROUP = "kubeflow.org"
WEBHOOK = "validator.pytorchjob.training-operator.kubeflow.org"
ROLES = ("Master", "Worker")
CONTAINER = "pytorch"
#: ``SupportedJobControllers`` (sets.List order: sorted).
MANAGERS = ("kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue")
_REPLICAS = "spec.pytorchReplicaSpecs"


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join(f'"{v}"' for v in values)


def _replica_errors(specs: dict[str, Any] | None) -> list[str]:
    """``validatePyTorchReplicaSpecs`` as ``field.Error`` strings (roles in a fixed order, not Go's map order)."""
    if specs is None:
        return [f"{_REPLICAS}: Required value: must be required"]
    found = []
    for role in sorted(specs, key=lambda r: (r not in ROLES, ROLES.index(r) if r in ROLES else 0, r)):
        spec, path = specs[role] or {}, f"{_REPLICAS}[{role}]"
        containers_path = f"{path}.template.spec.containers"
        if role not in ROLES:
            found.append(f'{path}: Unsupported value: "{role}": supported values: {_quoted(ROLES)}')
        containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
        if not containers:
            found.append(f"{containers_path}: Required value: must be specified")
        for index, container in enumerate(containers):
            if not container.get("image"):
                found.append(f"{containers_path}[{index}].image: Required value: must be required")
        if not any(c.get("name") == CONTAINER for c in containers):
            found.append(f"{containers_path}: Required value: must have at least one container with name {CONTAINER}")
        if role == "Master" and spec.get("replicas") != 1:
            found.append(f"{path}.replicas: Forbidden: must be 1")
        # release-1.9 pytorchjob_webhook.go: Worker.replicas >= 1; the wording is ours (upstream's string unverified).
        if role == "Worker" and spec.get("replicas") is not None and spec["replicas"] < 1:
            found.append(f"{path}.replicas: Forbidden: must be at least 1")
    return found


def webhook_errors(job: Obj, old: Obj | None = None) -> list[str]:
    """``validatePyTorchJob`` (+ the runPolicy checks) of a create, or of an update when ``old`` is given."""
    meta, spec = job["metadata"], job.get("spec") or {}
    found = []
    if problems := dns1035_label(meta.get("name", "")):
        found.append(f'metadata.name: Invalid value: "{meta.get("name", "")}": should match: {",".join(problems)}')
    elastic = spec.get("elasticPolicy")
    if elastic is not None and elastic.get("nProcPerNode") is not None and spec.get("nprocPerNode") is not None:
        found.append("spec.elasticPolicy.nProcPerNode: Forbidden: must not be used with spec.nprocPerNode")
    specs = spec.get("pytorchReplicaSpecs")
    # release-1.9 pytorchjob_webhook.go: elasticPolicy needs a Worker replica spec (rendezvous: worker-0); our wording.
    if elastic is not None and specs is not None and "Worker" not in specs:
        found.append(f"{_REPLICAS}[Worker]: Required value: must be set when elasticPolicy is set")
    found += _replica_errors(specs)
    manager = (spec.get("runPolicy") or {}).get("managedBy")
    path = "spec.runPolicy.managedBy"
    if old is not None and ((old.get("spec") or {}).get("runPolicy") or {}).get("managedBy") != manager:
        shown = "null" if manager is None else f'"{manager}"'
        found.append(f"{path}: Invalid value: {shown}: field is immutable")
    if manager is not None and manager not in MANAGERS:
        found.append(f'{path}: Unsupported value: "{manager}": supported values: {_quoted(MANAGERS)}')
    return found


class PyTorchJobAdmission:
    """Admission for ``pytorchjobs.kubeflow.org``: 422 for schema violations, 403 for the webhook's denials."""

    def __init__(self) -> None:
        self._crd = CrdSchema(schemas.PYTORCHJOBS, "PyTorchJob", GROUP)

    def _structural(self, job: Obj) -> None:
        self._crd.prune_and_default(job)
        if causes := self._crd.causes(job):
            raise self._crd.invalid(job, causes)

    def admit_create(self, obj: Obj) -> None:
        self._structural(obj)
        deny(WEBHOOK, webhook_errors(obj))

    def admit_update(self, obj: Obj, old: Obj) -> None:
        self._structural(obj)
        deny(WEBHOOK, webhook_errors(obj, old))
