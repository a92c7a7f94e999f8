"""What the RayCluster controller builds: head and worker pods and the head Service, as KubeRay v1.7.0 builds them.

``ray-project/kuberay`` ``ray-operator/controllers/ray/common/pod.go`` (``DefaultHeadPodTemplate``,
``DefaultWorkerPodTemplate``, ``BuildPod``, ``setMissingRayStartParams``, ``generateRayStartCommand``,
``setContainerEnvVars``, ``labelPod``, ``initLivenessAndReadinessProbe``), ``common/service.go``
(``BuildServiceForHeadPod``) and ``utils/util.go`` (``PodName``, ``GenerateHeadServiceName``,
``GenerateFQDNServiceName``). KubeRay's operator-level options keep their defaults: init-container and probe
injection on, login shell off, random head pod names (``<cluster>-head-`` + 5 characters). Not built: autoscaler
sidecar, GCS fault tolerance, TLS/auth, the history collector (the controller reports such specs as unsupported).
"""

from __future__ import annotations

import copy
import shlex
from typing import Any

from airflow_elastic.localcluster.quantity import quantity
from airflow_elastic.localcluster.store import Obj

API_VERSION, KIND = "ray.io/v1", "RayCluster"
KUBERAY_VERSION = "v1.7.0"
CLUSTER_LABEL, NODE_TYPE_LABEL, GROUP_LABEL = "ray.io/cluster", "ray.io/node-type", "ray.io/group"
IS_RAY_NODE_LABEL, IDENTIFIER_LABEL = "ray.io/is-ray-node", "ray.io/identifier"
ORIGIN_NAME_LABEL, ORIGIN_CRD_LABEL = "ray.io/originated-from-cr-name", "ray.io/originated-from-crd"
HEAD_GROUP = "headgroup"
DEFAULT_PORTS = {"client": 10001, "gcs-server": 6379, "dashboard": 8265, "metrics": 8080, "serve": 8000}
GCS_PORT, METRICS_PORT, AGENT_PORT = "6379", 8080, 52365
RAY_CONTAINER = 0  # utils.RayContainerIndex
BOOLEAN_VALUED = ("log-color", "include-dashboard", "include-log-monitor")  # convertParamMap's specials


def container_command(options: str = "") -> list[str]:
    """``utils.GetContainerCommand``: ``/bin/bash -c<options> --`` (``ENABLE_LOGIN_SHELL`` off)."""
    return ["/bin/bash", f"-c{options}", "--"]


def head_service_name(cluster: Obj) -> str:
    """``GenerateHeadServiceName`` for a RayCluster: ``headService.metadata.name`` or ``<cluster>-head-svc``."""
    custom = ((cluster["spec"]["headGroupSpec"].get("headService") or {}).get("metadata") or {}).get("name")
    return custom or f"{cluster['metadata']['name']}-head-svc"


def fqdn(cluster: Obj) -> str:
    return f"{head_service_name(cluster)}.{cluster['metadata']['namespace']}.svc.cluster.local"


def head_port(cluster: Obj) -> str:
    """``GetHeadPort``."""
    return str((cluster["spec"]["headGroupSpec"].get("rayStartParams") or {}).get("port", GCS_PORT))


def owner_reference(cluster: Obj) -> dict[str, Any]:
    meta = cluster["metadata"]
    ref = {"apiVersion": API_VERSION, "kind": KIND, "name": meta["name"], "uid": meta["uid"]}
    return {**ref, "controller": True, "blockOwnerDeletion": True}


def _check_label(value: str) -> str:
    """``CheckLabel``: at most 63 characters, starting with a letter."""
    value = value[-63:] if len(value) > 63 else value
    return ("r" + value[1:]) if value[:1].isdigit() or not value[:1].isalnum() else value


def pod_labels(cluster: str, node_type: str, group: str, template_labels: dict[str, str]) -> dict[str, str]:
    """``labelPod``: KubeRay's labels; the template's win except node type, group and cluster."""
    labels = {
        IS_RAY_NODE_LABEL: "yes",
        CLUSTER_LABEL: cluster,
        NODE_TYPE_LABEL: node_type,
        GROUP_LABEL: group,
        IDENTIFIER_LABEL: _check_label(f"{cluster}-{node_type}"),
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    for key, value in template_labels.items():
        if key not in (NODE_TYPE_LABEL, GROUP_LABEL, CLUSTER_LABEL):
            labels[key] = value
    return labels


def start_params(params: dict[str, str], node_type: str, port: str, address: str, container: Obj) -> dict[str, str]:
    """``setMissingRayStartParams`` then ``generateRayStartCommand``'s resource defaults."""
    params = {k: str(v) for k, v in params.items()}
    if node_type == "worker":
        params.setdefault("address", f"{address}:{port}")
    else:
        params.setdefault("dashboard-host", "0.0.0.0")
    params.setdefault("metrics-export-port", str(METRICS_PORT))
    params["block"] = "true"
    params.setdefault("dashboard-agent-listen-port", str(AGENT_PORT))
    resources = container.get("resources") or {}
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    if "num-cpus" not in params:
        cpu = limits.get("cpu") or requests.get("cpu")
        if cpu is not None and quantity(cpu) != 0:
            value = quantity(cpu)
            params["num-cpus"] = str(-(-value.numerator // value.denominator))  # Quantity.Value() rounds up
    if "memory" not in params and limits.get("memory") is not None and quantity(limits["memory"]) != 0:
        value = quantity(limits["memory"])
        params["memory"] = str(-(-value.numerator // value.denominator))
    if "num-gpus" not in params:
        for key in sorted(limits):
            if key.endswith("/gpu") and quantity(limits[key]) != 0:
                params["num-gpus"] = str(int(quantity(limits[key])))
                break
    return params


def ray_start_command(node_type: str, params: dict[str, str]) -> str:
    """``generateRayStartCommand`` with ``convertParamMap``: sorted flags, ``true`` bare, ``false`` dropped."""
    flags = ""
    for key in sorted(params):
        value = params[key]
        if value.lower() in ("true", "false") and key not in BOOLEAN_VALUED:
            flags += f" --{key} " if value.lower() == "true" else ""
        else:
            flags += f" --{key}={value} "
    return f"ray start --head {flags}" if node_type == "head" else f"ray start {flags}"


def _env_exists(container: Obj, name: str) -> bool:
    return any(e.get("name") == name for e in container.get("env") or [])


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _set_container_env(container: Obj, node_type: str, address: str, port: str, start: str) -> None:
    """``setContainerEnvVars`` (RayCluster creator, no defaults from the operator's configuration)."""
    env = container.setdefault("env", [])
    ip = "127.0.0.1"  # LOCAL_HOST
    if node_type == "worker":
        ip = address
        env += [{"name": "FQ_RAY_IP", "value": ip}, {"name": "RAY_IP", "value": ip.split(".")[0]}]
    env += [
        _field_env("RAY_CLUSTER_NAME", f"metadata.labels['{CLUSTER_LABEL}']"),
        _field_env("RAY_CLUSTER_NAMESPACE", "metadata.namespace"),
        _field_env("RAY_CLOUD_INSTANCE_ID", "metadata.name"),
        _field_env("RAY_NODE_TYPE_NAME", f"metadata.labels['{GROUP_LABEL}']"),
        {"name": "KUBERAY_GEN_RAY_START_CMD", "value": start},
    ]
    if not _env_exists(container, "RAY_PORT"):
        env.append({"name": "RAY_PORT", "value": port})
    if not _env_exists(container, "RAY_ADDRESS"):
        env.append({"name": "RAY_ADDRESS", "value": f"{ip}:{port}"})
    if not _env_exists(container, "RAY_USAGE_STATS_KUBERAY_IN_USE"):
        env.append({"name": "RAY_USAGE_STATS_KUBERAY_IN_USE", "value": "1"})
    if node_type == "head":
        tags = f"kuberay_version={KUBERAY_VERSION};kuberay_crd={KIND}"
        env.append({"name": "RAY_USAGE_STATS_EXTRA_TAGS", "value": tags})
    if not _env_exists(container, "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE"):
        env.append({"name": "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE", "value": "1"})


def _probes(container: Obj, params: dict[str, str], node_type: str) -> None:
    """``initLivenessAndReadinessProbe`` for Ray >= 2.53: ``httpGet /api/healthz`` on the dashboard agent's port."""
    port = int(params.get("dashboard-agent-listen-port", AGENT_PORT))
    action = {"httpGet": {"path": "/api/healthz", "port": port}}
    head = node_type == "head"
    container.setdefault(
        "livenessProbe",
        {"initialDelaySeconds": 30, "timeoutSeconds": 5 if head else 2, "periodSeconds": 5}
        | {"successThreshold": 1, "failureThreshold": 120, **action},
    )
    container.setdefault(
        "readinessProbe",
        {"initialDelaySeconds": 10, "timeoutSeconds": 5 if head else 2, "periodSeconds": 5}
        | {"successThreshold": 1, "failureThreshold": 10, **action},
    )


def _metrics_port(container: Obj) -> None:
    if not any(p.get("name") == "metrics" for p in container.get("ports") or []):
        container.setdefault("ports", []).append({"name": "metrics", "containerPort": METRICS_PORT})


def _wait_gcs_ready(container: Obj, address: str, port: str) -> Obj:
    """``DefaultWorkerPodTemplate``'s ``wait-gcs-ready`` init container (``ENABLE_INIT_CONTAINER_INJECTION`` on)."""
    script = f"""
					SECONDS=0
					while true; do
						if (( SECONDS <= 120 )); then
							if ray health-check --address {address}:{port} > /dev/null 2>&1; then
								echo "GCS is ready."
								break
							fi
							echo "$SECONDS seconds elapsed: Waiting for GCS to be ready."
						else
							if ray health-check --address {address}:{port}; then
								echo "GCS is ready. Any error messages above can be safely ignored."
								break
							fi
							echo "$SECONDS seconds elapsed: Still waiting for GCS to be ready. For troubleshooting, refer to the FAQ at https://docs.ray.io/en/master/cluster/kubernetes/troubleshooting.html."
						fi
						sleep 5
					done
				"""  # noqa: E501 (upstream's text)
    limits = {"cpu": "200m", "memory": "256Mi"}
    init: Obj = {
        "name": "wait-gcs-ready",
        "image": container.get("image", ""),
        "command": container_command(),
        "args": [script],
        "resources": {"limits": dict(limits), "requests": dict(limits)},
        "env": copy.deepcopy(container.get("env") or []),
        "volumeMounts": copy.deepcopy(container.get("volumeMounts") or []),
    }
    for key in ("imagePullPolicy", "securityContext"):
        if key in container:
            init[key] = copy.deepcopy(container[key])
    return init


def _shm(pod: Obj, params: dict[str, str]) -> None:
    """``BuildPod``'s ``/dev/shm`` emptyDir (Memory) for the object store, unless ``plasma-directory`` is set."""
    if "plasma-directory" in params:
        return
    container = pod["spec"]["containers"][RAY_CONTAINER]
    mounts = container.setdefault("volumeMounts", [])
    if not any(m.get("mountPath") == "/dev/shm" for m in mounts):
        mounts.append({"name": "shared-mem", "mountPath": "/dev/shm"})
        volume: Obj = {"name": "shared-mem", "emptyDir": {"medium": "Memory"}}
        memory = ((container.get("resources") or {}).get("limits") or {}).get("memory")
        if memory is not None:
            volume["emptyDir"]["sizeLimit"] = memory
        pod["spec"].setdefault("volumes", []).append(volume)


def build_pod(cluster: Obj, node_type: str, group: Obj) -> Obj:
    """``buildHeadPod``/``buildWorkerPod``: the pod of one Ray node of ``group`` (the head group spec or a worker
    group spec), created with ``generateName``."""
    name, namespace = cluster["metadata"]["name"], cluster["metadata"]["namespace"]
    template = copy.deepcopy(group["template"])
    meta, spec = template.get("metadata") or {}, template["spec"]
    group_name = HEAD_GROUP if node_type == "head" else group["groupName"]
    prefix = name if node_type == "head" else f"{name}-{group_name}"
    port, address = head_port(cluster), fqdn(cluster)
    container = spec["containers"][RAY_CONTAINER]
    if node_type == "worker":
        spec.setdefault("initContainers", []).append(_wait_gcs_ready(container, address, port))
    labels = pod_labels(name, node_type, group_name, {**(meta.get("labels") or {}), **(group.get("labels") or {})})
    params = start_params(group.get("rayStartParams") or {}, node_type, port, address, container)
    _metrics_port(container)
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{prefix[:50].lower()}-{node_type}-",
            "namespace": namespace,
            "labels": labels,
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [owner_reference(cluster)],
        },
        "spec": spec,
    }
    _shm(pod, params)
    command = " ".join(shlex.quote(c) for c in container.get("command") or [])
    command += " ".join(shlex.quote(a) for a in container.get("args") or [])
    start = ray_start_command(node_type, params)
    overwrite = (meta.get("annotations") or {}).get("ray.io/overwrite-container-cmd", "").lower() == "true"
    if not overwrite and "ray start" not in command:
        generated = f"ulimit -n ${{RAY_START_ULIMIT_OPEN_FILES:-65536}}; {start}"
        container["command"] = container_command()
        container["args"] = [f"{command} && {generated}" if command else generated]
    for init in spec.get("initContainers") or []:
        init_env = init.setdefault("env", [])
        init_env += [{"name": "FQ_RAY_IP", "value": address}, {"name": "RAY_IP", "value": address.split(".")[0]}]
    _set_container_env(container, node_type, address, port, start)
    _probes(container, params, node_type)
    return pod


def build_head_service(cluster: Obj) -> Obj:
    """``BuildServiceForHeadPod`` without a custom ``headService``: headless (``ENABLE_RAY_HEAD_CLUSTER_IP_SERVICE``
    off), publishing not-ready addresses, the head container's named ports (else KubeRay's defaults) plus metrics."""
    name = cluster["metadata"]["name"]
    labels = {
        CLUSTER_LABEL: name,
        NODE_TYPE_LABEL: "head",
        IDENTIFIER_LABEL: _check_label(f"{name}-head"),
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    head = cluster["spec"]["headGroupSpec"]
    declared = {
        (p.get("name") or f"{p['containerPort']}-port"): int(p["containerPort"])
        for p in head["template"]["spec"]["containers"][RAY_CONTAINER].get("ports") or []
    }
    ports = declared or dict(DEFAULT_PORTS)
    ports.setdefault("metrics", METRICS_PORT)
    spec: Obj = {
        "selector": dict(labels),
        "ports": [{"name": n, "port": p, "appProtocol": "tcp"} for n, p in sorted(ports.items())],
    }
    service_type = head.get("serviceType") or "ClusterIP"
    if service_type == "ClusterIP":
        spec |= {"clusterIP": "None", "publishNotReadyAddresses": True}
    else:
        spec["type"] = service_type
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": head_service_name(cluster),
            "namespace": cluster["metadata"]["namespace"],
            "labels": dict(labels),
            "ownerReferences": [owner_reference(cluster)],
        },
        "spec": spec,
    }
