"""The CustomResourceDefinitions of the custom resources the cluster serves, as ``apiextensions.k8s.io/v1`` objects.

A real cluster has a CRD object for every custom resource (kubernetes/kubernetes
``staging/src/k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1/types.go``, ``CustomResourceDefinition``),
and clients read it to learn which version of a controller is installed (the provider checks the TrainJob CRD's
shape before it creates one). :func:`install` writes one per served custom resource at start-up, with the packaged
upstream ``openAPIV3Schema`` and the ``Established``/``NamesAccepted`` conditions the apiextensions controllers set
(``pkg/controller/establish/establishing_controller.go``, ``pkg/controller/status/naming_controller.go``).

The objects describe the server, they do not configure it: the served resources and their validation stay the
packaged ones, so editing a CRD here changes what a client reads (as a test of a version mismatch needs), not what
the server accepts.
"""

from __future__ import annotations

import copy
from typing import Any

from airflow_elastic.kube import schemas
from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.resources import ALL, CUSTOMRESOURCEDEFINITIONS, Resource
from airflow_elastic.localcluster.store import Store

#: API groups that are built in (served by kube-apiserver itself, no CRD).
BUILT_IN = frozenset({"", "batch", "apps", "autoscaling", "policy", "apiextensions.k8s.io"})
#: The packaged ``openAPIV3Schema`` of each custom resource (``schemas``), by resource key.
SCHEMAS = {
    "jobsets.jobset.x-k8s.io": schemas.JOBSET,
    "trainjobs.trainer.kubeflow.org": schemas.TRAINJOBS,
    "clustertrainingruntimes.trainer.kubeflow.org": schemas.CLUSTER_TRAINING_RUNTIMES,
    "trainingruntimes.trainer.kubeflow.org": schemas.TRAINING_RUNTIMES,
    "pytorchjobs.kubeflow.org": schemas.PYTORCHJOBS,
    "inferenceservices.serving.kserve.io": schemas.INFERENCESERVICES,
    "rayclusters.ray.io": schemas.RAYCLUSTERS,
    "rayjobs.ray.io": schemas.RAYJOBS,
}


def crd(res: Resource) -> dict[str, Any]:
    """The CustomResourceDefinition of the custom resource ``res``."""
    names: dict[str, Any] = {
        "plural": res.plural,
        "singular": res.singular,
        "kind": res.kind,
        "listKind": res.list_kind,
    }
    if res.short_names:
        names["shortNames"] = list(res.short_names)
    if res.categories:
        names["categories"] = list(res.categories)
    version: dict[str, Any] = {"name": res.version, "served": True, "storage": True}
    if res.key in SCHEMAS:
        version["schema"] = {"openAPIV3Schema": copy.deepcopy(schemas.load(SCHEMAS[res.key]))}
    if "status" in res.subresources:
        version["subresources"] = {"status": {}}
    accepted = {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found"}
    established = {
        "type": "Established",
        "status": "True",
        "reason": "InitialNamesAccepted",
        "message": "the initial names have been accepted",
    }
    return {
        "apiVersion": CUSTOMRESOURCEDEFINITIONS.api_version,
        "kind": CUSTOMRESOURCEDEFINITIONS.kind,
        "metadata": {"name": res.key},
        "spec": {
            "group": res.group,
            "names": names,
            "scope": "Namespaced" if res.namespaced else "Cluster",
            "versions": [version],
        },
        "status": {"acceptedNames": names, "storedVersions": [res.version], "conditions": [accepted, established]},
    }


def install(store: Store) -> None:
    """Write the CRD of every served custom resource (idempotent: a restarted cluster keeps its own, edits included),
    then its status (a create ignores the status of a resource with a status subresource, as the API server does)."""
    for res in ALL:
        if res.group not in BUILT_IN:
            body = crd(res)
            try:
                created = store.create(CUSTOMRESOURCEDEFINITIONS, None, body)
            except errors.AlreadyExists:
                continue
            store.update(CUSTOMRESOURCEDEFINITIONS, {**created, "status": body["status"]}, subresource="status")
