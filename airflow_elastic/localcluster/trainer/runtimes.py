"""What a Kubeflow Trainer installation ships besides its controller, installed when the local cluster starts: the
default runtimes and the public ConfigMap the Trainer SDK reads the control-plane version from."""

from __future__ import annotations

import contextlib
from importlib import resources

import yaml

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.resources import CLUSTERTRAININGRUNTIMES, CONFIGMAPS, NAMESPACES
from airflow_elastic.localcluster.store import Store

#: Package files under ``localcluster/manifests`` (upstream ``manifests/base/runtimes``).
DEFAULT_RUNTIMES = ("torch_distributed.yaml",)

#: kubeflow/trainer v2.3.0 ``manifests/overlays/manager/kustomization.yaml``: everything is deployed in this
#: namespace, and its ``configMapGenerator`` makes ``kubeflow-trainer-public`` (``kubeflow_trainer_version``), which
#: the Trainer SDK's ``KubernetesBackend.verify_backend`` reads (it warns when it is missing). Upstream also binds a
#: Role reading it to ``system:authenticated`` (``manifests/base/rbac/public_configmap_role*.yaml``); the local
#: cluster authorizes every request, so there is nothing to bind.
SYSTEM_NAMESPACE = "kubeflow-system"
PUBLIC_CONFIGMAP = "kubeflow-trainer-public"
TRAINER_VERSION = "v2.3.0"


def install_default_runtimes(store: Store) -> None:
    """Create each default ClusterTrainingRuntime that does not exist (a restarted cluster keeps its own)."""
    for name in DEFAULT_RUNTIMES:
        body = yaml.safe_load(resources.files("airflow_elastic.localcluster").joinpath("manifests", name).read_text())
        with contextlib.suppress(errors.AlreadyExists):
            store.create(CLUSTERTRAININGRUNTIMES, None, body)


def install_public_configmap(store: Store) -> None:
    """Create the ``kubeflow-system`` namespace and the Trainer's public ConfigMap in it, unless they exist."""
    with contextlib.suppress(errors.AlreadyExists):
        store.create(NAMESPACES, None, {"metadata": {"name": SYSTEM_NAMESPACE}})
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": PUBLIC_CONFIGMAP, "namespace": SYSTEM_NAMESPACE},
        "data": {"kubeflow_trainer_version": TRAINER_VERSION},
    }
    with contextlib.suppress(errors.AlreadyExists):
        store.create(CONFIGMAPS, SYSTEM_NAMESPACE, body)
