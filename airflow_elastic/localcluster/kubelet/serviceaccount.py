"""In-cluster credentials for pods, as a real kubelet gives them (``KUBERNETES_SERVICE_*`` and the service-account
volume), so that code in a pod can call the API server with the usual in-cluster configuration.

The local cluster has one bearer token: every pod gets it (a development cluster; there is no RBAC and no
per-service-account token). The pod's ``serviceaccount`` directory holds ``token`` and ``ca.crt`` as symlinks to the
cluster's files — so a rotated token (``LocalCluster.expire_token``) reaches running pods, as kubelets refresh
projected tokens — and a ``namespace`` file. It is exposed like any mount: a symlink at
``<cwd>/var/run/secrets/kubernetes.io/serviceaccount`` and the variable
``LOCALCLUSTER_MOUNT_VAR_RUN_SECRETS_KUBERNETES_IO_SERVICEACCOUNT``. Nothing is mounted when the pod sets
``automountServiceAccountToken: false`` or a container mounts something else at that path.
"""

from __future__ import annotations

from pathlib import Path

from airflow_elastic.localcluster.kubelet.volumes import mount
from airflow_elastic.localcluster.store import Obj

MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
VOLUME = "kube-api-access"
#: The cluster's token and CA certificate in its state directory (written by ``serve.py``).
TOKEN_FILE = "token"
CA_FILE = "server.crt"


def automount(pod: Obj) -> bool:
    """Whether the pod gets the service-account volume (``automountServiceAccountToken`` is not false)."""
    return (pod.get("spec") or {}).get("automountServiceAccountToken") is not False


def prepare(pod: Obj, pod_dir: Path, state_dir: Path) -> Path:
    """Write the pod's ``serviceaccount`` directory; returns it."""
    target = pod_dir / "serviceaccount"
    target.mkdir(parents=True, exist_ok=True)
    for name, source in (("token", state_dir / TOKEN_FILE), ("ca.crt", state_dir / CA_FILE)):
        link = target / name
        link.unlink(missing_ok=True)
        link.symlink_to(source.resolve())
    (target / "namespace").write_text(pod["metadata"]["namespace"])
    return target


def expose(container: Obj, directory: Path, cwd: Path) -> dict[str, str]:
    """Mount ``directory`` at the standard path for ``container`` (unless it mounts that path itself); the env."""
    if any(vm.get("mountPath", "").rstrip("/") == MOUNT_PATH for vm in container.get("volumeMounts") or []):
        return {}
    return mount({"volumeMounts": [{"name": VOLUME, "mountPath": MOUNT_PATH}]}, {VOLUME: directory}, cwd)


def service_env(address: str) -> dict[str, str]:
    """``KUBERNETES_SERVICE_HOST``/``PORT`` (and ``PORT_HTTPS``) for the API server at ``host:port``, which a real
    kubelet sets in every container (before the container's own env, which may override them)."""
    host, _, port = address.rpartition(":")
    return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port, "KUBERNETES_SERVICE_PORT_HTTPS": port}
