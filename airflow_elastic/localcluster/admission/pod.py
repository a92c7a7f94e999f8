"""core/v1 Pod defaulting and a practical subset of ``ValidatePodCreate``/``ValidatePodUpdate``.

Controllers create pods through this, so a template the Job accepted but a pod cannot have is rejected here
and becomes the Job's ``FailedCreate`` event instead of a crashed process later.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.admission.common import (
    Causes,
    dns1123_label,
    dns1123_subdomain,
    invalid,
    labels_causes,
    required,
)
from airflow_elastic.localcluster.store import Obj

RESTART_POLICIES = ("Always", "OnFailure", "Never")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_POD_UPDATE_FORBIDDEN = (
    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing "
    "tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def _unsupported(path: str, value: Any, supported: tuple[str, ...]) -> dict[str, str]:
    listed = ", ".join(f'"{s}"' for s in supported)
    return errors.cause(path, f'Unsupported value: "{value}": supported values: {listed}', "FieldValueNotSupported")


PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
#: ``SetDefaults_Probe`` (kubernetes ``pkg/apis/core/v1/defaults.go``): each of these left 0 or unset gets its default.
PROBE_DEFAULTS = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}


def default_probe(probe: dict[str, Any]) -> None:
    """``SetDefaults_Probe`` and, for an HTTP probe, ``SetDefaults_HTTPGetAction`` (path ``/``, scheme ``HTTP``)."""
    for key, value in PROBE_DEFAULTS.items():
        if not probe.get(key):
            probe[key] = value
    if isinstance(probe.get("httpGet"), dict):
        probe["httpGet"]["path"] = probe["httpGet"].get("path") or "/"
        probe["httpGet"]["scheme"] = probe["httpGet"].get("scheme") or "HTTP"


def default_pod_spec(spec: dict[str, Any]) -> None:
    """The core/v1 defaults controllers and clients rely on (``SetDefaults_PodSpec`` and friends)."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for group in ("initContainers", "containers"):
        for container in spec.get(group) or []:
            image = str(container.get("image", ""))
            latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
            container.setdefault("imagePullPolicy", "Always" if latest and "@" not in image else "IfNotPresent")
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            for kind in PROBES:
                if container.get(kind):
                    default_probe(container[kind])
            for port in container.get("ports") or []:
                port.setdefault("protocol", "TCP")  # SetDefaults_ContainerPort


def _container_causes(path: str, containers: list[dict[str, Any]], seen: set[str]) -> Causes:
    causes: Causes = []
    for i, container in enumerate(containers):
        here = f"{path}[{i}]"
        name = container.get("name")
        if not name:
            causes.append(required(f"{here}.name"))
        else:
            causes += [invalid(f"{here}.name", name, m) for m in dns1123_label(name)]
            if name in seen:
                causes.append(errors.cause(f"{here}.name", f'Duplicate value: "{name}"', "FieldValueDuplicate"))
            seen.add(name)
        if not container.get("image"):
            causes.append(required(f"{here}.image"))
        for j, env in enumerate(container.get("env") or []):
            env_name = env.get("name", "")
            if not env_name:
                causes.append(required(f"{here}.env[{j}].name"))
            elif not _ENV_NAME.match(env_name):
                causes.append(
                    invalid(
                        f"{here}.env[{j}].name",
                        env_name,
                        "a valid environment variable name must consist of alphabetic characters, digits, '_', "
                        "'-', or '.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or "
                        "'MyEnvName1', regex used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')",
                    )
                )
        for j, mount in enumerate(container.get("volumeMounts") or []):
            if not mount.get("mountPath"):
                causes.append(required(f"{here}.volumeMounts[{j}].mountPath"))
    return causes


def pod_spec_causes(path: str, spec: dict[str, Any]) -> Causes:
    """Errors in a PodSpec (used for pods and for pod templates of Jobs)."""
    causes: Causes = []
    containers = spec.get("containers") or []
    if not containers:
        causes.append(required(f"{path}.containers"))
    seen: set[str] = set()
    causes += _container_causes(f"{path}.containers", containers, seen)
    causes += _container_causes(f"{path}.initContainers", spec.get("initContainers") or [], seen)
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in RESTART_POLICIES:
        causes.append(_unsupported(f"{path}.restartPolicy", policy, RESTART_POLICIES))
    for key in ("hostname", "subdomain"):
        if spec.get(key):
            causes += [invalid(f"{path}.{key}", spec[key], m) for m in dns1123_label(spec[key])]
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and grace < 0:
        causes.append(invalid(f"{path}.terminationGracePeriodSeconds", grace, "must be greater than or equal to 0"))
    volumes: set[str] = set()
    for i, volume in enumerate(spec.get("volumes") or []):
        name = volume.get("name", "")
        causes += [invalid(f"{path}.volumes[{i}].name", name, m) for m in dns1123_label(name)]
        if name in volumes:
            causes.append(
                errors.cause(f"{path}.volumes[{i}].name", f'Duplicate value: "{name}"', "FieldValueDuplicate")
            )
        volumes.add(name)
    for group in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(group) or []):
            for j, mount in enumerate(container.get("volumeMounts") or []):
                if mount.get("name") not in volumes:
                    causes.append(
                        errors.cause(
                            f"{path}.{group}[{i}].volumeMounts[{j}].name",
                            f'Not found: "{mount.get("name")}"',
                            "FieldValueNotFound",
                        )
                    )
    return causes


def metadata_causes(meta: dict[str, Any]) -> Causes:
    name = meta.get("name") or ""
    causes = [invalid("metadata.name", name, m) for m in dns1123_subdomain(name)] if name else []
    return causes + labels_causes("metadata.labels", meta.get("labels"))


class PodAdmission:
    """Defaults then validates pods; spec updates are limited to what the API server allows."""

    def admit_create(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        default_pod_spec(spec)
        causes = metadata_causes(obj["metadata"]) + pod_spec_causes("spec", spec)
        if causes:
            raise errors.Invalid.of("Pod", obj["metadata"].get("name", ""), causes)

    def admit_update(self, obj: Obj, old: Obj) -> None:
        spec, old_spec = copy.deepcopy(obj.get("spec") or {}), copy.deepcopy(old.get("spec") or {})
        for mutable in ("activeDeadlineSeconds", "tolerations", "schedulingGates"):
            spec.pop(mutable, None)
            old_spec.pop(mutable, None)
        for group in ("containers", "initContainers"):
            for new_c, old_c in zip(spec.get(group) or [], old_spec.get(group) or [], strict=False):
                new_c.pop("image", None)
                old_c.pop("image", None)
        causes = labels_causes("metadata.labels", obj["metadata"].get("labels"))
        if spec != old_spec:
            causes.append(errors.cause("spec", _POD_UPDATE_FORBIDDEN, "FieldValueForbidden"))
        if causes:
            raise errors.Invalid.of("Pod", obj["metadata"]["name"], causes)
