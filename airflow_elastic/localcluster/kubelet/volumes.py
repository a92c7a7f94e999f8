"""Pod volumes as host directories, and how a container's mounts are exposed without a mount namespace."""

from __future__ import annotations

import base64
import re
import shutil
from pathlib import Path

from airflow_elastic.localcluster.kubelet.env import MOUNT_ENV_PREFIX, ContainerError, field_ref, resource_field_ref
from airflow_elastic.localcluster.resources import CONFIGMAPS, SECRETS
from airflow_elastic.localcluster.store import Obj, Store


class MountError(Exception):
    """A volume cannot be set up yet (e.g. its ConfigMap does not exist); reported as ``FailedMount``."""


def claim_dir(state_dir: Path, namespace: str, claim: str) -> Path:
    """A PersistentVolumeClaim's storage, shared by every pod using the claim and kept after they end."""
    return state_dir / "volumes" / namespace / claim


def mount_env_name(mount_path: str) -> str:
    """``/data/ckpt-1`` → ``LOCALCLUSTER_MOUNT_DATA_CKPT_1``."""
    return MOUNT_ENV_PREFIX + (re.sub(r"[^A-Za-z0-9]", "_", mount_path.strip("/")).upper() or "ROOT")


def _write_files(target: Path, files: dict[str, bytes], mode: int) -> None:
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for rel, data in files.items():
        path = target / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            raise MountError(f"invalid path {rel!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)


def _source_files(store: Store, pod: Obj, kind: str, source: Obj) -> dict[str, bytes] | None:
    namespace = pod["metadata"]["namespace"]
    if kind == "configMap":
        name = source.get("name", "")
        cm = store.find(CONFIGMAPS, namespace, name)
        if cm is None:
            if source.get("optional"):
                return {}
            raise MountError(f'configmap "{name}" not found')
        data = {k: v.encode() for k, v in (cm.get("data") or {}).items()}
        data |= {k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()}
    elif kind == "secret":
        name = source.get("secretName") or source.get("name", "")
        secret = store.find(SECRETS, namespace, name)
        if secret is None:
            if source.get("optional"):
                return {}
            raise MountError(f'secret "{name}" not found')
        data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        data |= {k: v.encode() for k, v in (secret.get("stringData") or {}).items()}
    else:  # downwardAPI
        data = {}
        for item in source.get("items") or []:
            try:
                if "fieldRef" in item:
                    value = field_ref(pod, item["fieldRef"].get("fieldPath", ""))
                else:
                    container = (pod["spec"].get("containers") or [{}])[0]
                    value = resource_field_ref(pod, container, item.get("resourceFieldRef") or {}, store)
            except ContainerError as err:
                raise MountError(err.message) from err
            data[item["path"]] = value.encode()
        return data
    items = source.get("items")
    if not items:
        return data
    picked = {}
    for item in items:
        if item["key"] not in data:
            if source.get("optional"):
                continue
            what = "configmap" if kind == "configMap" else "secret"
            raise MountError(f"{what} references non-existent config key: {item['key']}")
        picked[item["path"]] = data[item["key"]]
    return picked


def prepare_volumes(store: Store, pod: Obj, pod_dir: Path, state_dir: Path) -> tuple[dict[str, Path], list[str]]:
    """Create every volume's directory; returns them by name and warnings about unsupported volume types."""
    volumes: dict[str, Path] = {}
    warnings: list[str] = []
    for volume in pod["spec"].get("volumes") or []:
        try:
            warning = _prepare(store, pod, volume, pod_dir, state_dir, volumes)
        except MountError as err:
            raise MountError(f'MountVolume.SetUp failed for volume "{volume["name"]}" : {err}') from err
        if warning:
            warnings.append(warning)
    return volumes, warnings


def _prepare(store: Store, pod: Obj, volume: Obj, pod_dir: Path, state_dir: Path, volumes: dict[str, Path]) -> str:
    """Set up one volume into ``volumes``; returns a warning for unsupported types."""
    name = volume["name"]
    private = pod_dir / "volumes" / name
    if "emptyDir" in volume:
        private.mkdir(parents=True, exist_ok=True)
        volumes[name] = private
    elif "hostPath" in volume:
        path = Path(volume["hostPath"]["path"])
        if not path.exists():
            if volume["hostPath"].get("type") in ("DirectoryOrCreate", None, ""):
                path.mkdir(parents=True, exist_ok=True)
            else:
                raise MountError(f"hostPath type check failed: {path} is not a {volume['hostPath']['type']}")
        volumes[name] = path
    elif "persistentVolumeClaim" in volume:
        shared = claim_dir(state_dir, pod["metadata"]["namespace"], volume["persistentVolumeClaim"]["claimName"])
        shared.mkdir(parents=True, exist_ok=True)
        volumes[name] = shared
    elif kinds := [k for k in ("configMap", "secret", "downwardAPI") if k in volume]:
        files = _source_files(store, pod, kinds[0], volume[kinds[0]]) or {}
        _write_files(private, files, volume[kinds[0]].get("defaultMode", 0o644))
        volumes[name] = private
    elif "projected" in volume:
        files = {}
        for source in volume["projected"].get("sources") or []:
            for kind in ("configMap", "secret", "downwardAPI"):
                if kind in source:
                    files |= _source_files(store, pod, kind, source[kind]) or {}
        _write_files(private, files, volume["projected"].get("defaultMode", 0o644))
        volumes[name] = private
    else:
        private.mkdir(parents=True, exist_ok=True)
        volumes[name] = private
        kind = next((k for k in volume if k != "name"), "unknown")
        return f'volume "{name}": type {kind} is not supported by the local cluster; mounted as an empty directory'
    return ""


def mount(container: Obj, volumes: dict[str, Path], cwd: Path) -> dict[str, str]:
    """Expose each volumeMount: a symlink at ``<cwd>/<mountPath without leading />`` and an env var
    ``LOCALCLUSTER_MOUNT_<PATH>`` with the absolute directory. ``readOnly`` is not enforced."""
    env: dict[str, str] = {}
    for vm in container.get("volumeMounts") or []:
        source = volumes.get(vm["name"])
        if source is None:
            raise ContainerError("CreateContainerConfigError", f'volume "{vm["name"]}" not found')
        if vm.get("subPath"):
            source = source / vm["subPath"]
            source.mkdir(parents=True, exist_ok=True)
        rel = Path(vm["mountPath"].lstrip("/"))
        if ".." in rel.parts:
            raise ContainerError("CreateContainerConfigError", f"invalid mountPath {vm['mountPath']!r}")
        env[mount_env_name(vm["mountPath"])] = str(source.resolve())
        if not rel.parts:
            continue  # mounted at "/": only the env var
        link = cwd / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.is_file():
            link.unlink()
        elif link.is_dir():
            shutil.rmtree(link)
        link.symlink_to(source.resolve(), target_is_directory=True)
    return env
