"""A container's command line and environment, resolved from the pod spec as the kubelet does."""

from __future__ import annotations

import base64
import math
import os
import sys
from collections.abc import Mapping
from typing import Any

from airflow_elastic.localcluster import images
from airflow_elastic.localcluster.config import ClusterConfig
from airflow_elastic.localcluster.quantity import quantity
from airflow_elastic.localcluster.resources import CONFIGMAPS, NODES, SECRETS
from airflow_elastic.localcluster.store import Obj, Store

TERMINATION_LOG_ENV = "LOCALCLUSTER_TERMINATION_LOG"
MOUNT_ENV_PREFIX = "LOCALCLUSTER_MOUNT_"
#: Tells code in a container where its main process is: no process is PID 1 here, the main process leads its own
#: session instead (``airflow_elastic.runtime.signals`` reads it to warn a process that will not see SIGTERM).
MAIN_PROCESS_ENV = "LOCALCLUSTER_MAIN_PROCESS"
MAIN_PROCESS_SESSION_LEADER = "session-leader"


class ContainerError(Exception):
    """A container cannot be created; ``reason`` is its waiting reason (``CreateContainerConfigError``,
    ``ErrImagePull``)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: defined names are replaced, ``$$`` escapes, the rest stays as is."""
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    out.append(env[name] if name in env else text[i : end + 1])
                    i = end + 1
                    continue
        out.append(ch)
        i += 1
    return "".join(out)


def base_env(hostname: str, cwd: str) -> dict[str, str]:
    """What every container starts from: the cluster's Python first on PATH, HOME in the working dir."""
    path = os.pathsep.join(
        [os.path.dirname(sys.executable), "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    )
    return {"PATH": path, "HOME": cwd, "LANG": "C.UTF-8", "HOSTNAME": hostname}


def command_line(container: Obj, config: ClusterConfig, env: Mapping[str, str]) -> list[str]:
    """``command`` + ``args`` (expanded); without a command, the image's mapped prefix stands for its entrypoint."""
    image = container.get("image", "")
    if config.strict_images and image not in config.image_map and images.builtin_name(image) is None:
        raise ContainerError(
            "ErrImagePull",
            f'image "{image}" is not in the local cluster\'s image_map (strict_images is set); nothing is pulled',
        )
    command = [expand(str(c), env) for c in container.get("command") or []]
    args = [expand(str(a), env) for a in container.get("args") or []]
    if not command:
        try:
            command = list(config.image_map.get(image) or images.builtin(image) or [])
        except images.ImageUnavailable as err:
            raise ContainerError("CreateContainerConfigError", str(err)) from err
    argv = command + args
    if not argv or not command:
        raise ContainerError(
            "ErrImagePull",
            f'image "{image}" has no local mapping: the local cluster runs no images; set the container\'s command '
            "or map the image to a command in the cluster's image_map",
        )
    return argv


def field_ref(pod: Obj, path: str) -> str:
    """A downward-API ``fieldRef`` value."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    for prefix, source in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if path.startswith(prefix + "['") and path.endswith("']"):
            return str((meta.get(source) or {}).get(path[len(prefix) + 2 : -2], ""))
        if path == prefix:
            return "\n".join(f'{k}="{v}"' for k, v in sorted((meta.get(source) or {}).items()))
    simple: dict[str, Any] = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName") or spec.get("serviceAccount") or "default",
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
        "status.podIPs": ",".join(i.get("ip", "") for i in status.get("podIPs") or []),
        "status.hostIPs": ",".join(i.get("ip", "") for i in status.get("hostIPs") or []),
    }
    if path not in simple:
        raise ContainerError("CreateContainerConfigError", f"unsupported fieldRef fieldPath: {path}")
    return "" if simple[path] is None else str(simple[path])


def resource_field_ref(pod: Obj, container: Obj, ref: Obj, store: Store) -> str:
    """``limits.cpu``, ``requests.memory``, ...: ceil(value / divisor); an unset limit is the node's allocatable."""
    if ref.get("containerName"):
        containers = (pod["spec"].get("containers") or []) + (pod["spec"].get("initContainers") or [])
        container = next((c for c in containers if c.get("name") == ref["containerName"]), container)
    kind, _, name = ref.get("resource", "").partition(".")
    res = container.get("resources") or {}
    raw = (res.get(kind) or {}).get(name)
    if raw is None and kind == "requests":
        raw = (res.get("limits") or {}).get(name)
    if raw is None and kind == "limits":
        node = store.find(NODES, None, pod["spec"].get("nodeName", ""))
        raw = ((node or {}).get("status", {}).get("allocatable") or {}).get(name)
    value = quantity(raw) if raw is not None else quantity(0)
    divisor = quantity(ref.get("divisor") or "1")
    return str(math.ceil(value / divisor))


def _config_data(store: Store, kind: str, namespace: str, name: str) -> dict[str, str] | None:
    if kind == "configmap":
        cm = store.find(CONFIGMAPS, namespace, name)
        return None if cm is None else {**(cm.get("data") or {})}
    secret = store.find(SECRETS, namespace, name)
    if secret is None:
        return None
    data = {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (secret.get("data") or {}).items()}
    return {**data, **(secret.get("stringData") or {})}


def _key_ref(store: Store, namespace: str, kind: str, ref: Obj) -> str | None:
    data = _config_data(store, kind, namespace, ref.get("name", ""))
    title = "ConfigMap" if kind == "configmap" else "Secret"
    if data is None:
        if ref.get("optional"):
            return None
        raise ContainerError("CreateContainerConfigError", f'{kind} "{ref.get("name")}" not found')
    if ref.get("key") not in data:
        if ref.get("optional"):
            return None
        raise ContainerError(
            "CreateContainerConfigError", f"couldn't find key {ref.get('key')} in {title} {namespace}/{ref.get('name')}"
        )
    return data[ref["key"]]


def container_env(pod: Obj, container: Obj, store: Store) -> dict[str, str]:
    """The container's declared environment (``envFrom`` then ``env``, in order, with ``$(VAR)`` expansion)."""
    namespace = pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        for kind, field in (("configmap", "configMapRef"), ("secret", "secretRef")):
            if field not in source:
                continue
            ref = source[field]
            data = _config_data(store, kind, namespace, ref.get("name", ""))
            if data is None:
                if ref.get("optional"):
                    continue
                raise ContainerError("CreateContainerConfigError", f'{kind} "{ref.get("name")}" not found')
            for key, value in data.items():
                env[source.get("prefix", "") + key] = value
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand(str(var.get("value", "")), env)
            continue
        source = var["valueFrom"]
        resolved: str | None
        if "fieldRef" in source:
            resolved = field_ref(pod, source["fieldRef"].get("fieldPath", ""))
        elif "resourceFieldRef" in source:
            resolved = resource_field_ref(pod, container, source["resourceFieldRef"], store)
        elif "configMapKeyRef" in source:
            resolved = _key_ref(store, namespace, "configmap", source["configMapKeyRef"])
        elif "secretKeyRef" in source:
            resolved = _key_ref(store, namespace, "secret", source["secretKeyRef"])
        else:
            raise ContainerError("CreateContainerConfigError", f"unsupported valueFrom for env var {name}")
        if resolved is not None:
            env[name] = resolved
    return env
