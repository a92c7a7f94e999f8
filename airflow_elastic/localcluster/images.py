"""Images every local cluster can run without an ``--image-map`` entry (an ``--image-map`` entry still wins).

* ``ghcr.io/airflow-elastic/kserve-pytorch:0.21.0`` — the KServe PyTorch predictor (``serving/pytorch_server.py``)
  under the serving Python: ``$AIRFLOW_ELASTIC_SERVING_PYTHON``, else ``<repo>/.venv-serving/bin/python`` when it
  exists (``make serving-venv``; kserve cannot share Airflow's environment). ``docker/predictor/Dockerfile`` builds
  the real image.
* ``kserve/storage-initializer:v0.20.0`` — the storage initializer (``serving/storage_initializer.py``) under the
  cluster's own Python.
* ``pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime`` — the image of Kubeflow Trainer's default ``torch-distributed``
  runtime. It has no entrypoint, so a container's ``args`` alone run as its command (``sh -c 'exec "$@"'`` stands
  for that; without args nothing runs); ``python3`` and ``torchrun`` resolve to the cluster's own environment,
  first on ``PATH``.
* ``rayproject/ray:<version>[-<variant>]`` (KubeRay's images; also with a ``docker.io/`` prefix) — a Ray node, a
  RayJob submitter: KubeRay always gives the container a command (``/bin/bash -c -- "ulimit ...; ray start ..."``,
  ``ray-operator/controllers/ray/common/pod.go`` ``BuildPod``), which runs as given with Ray's environment first on
  ``PATH``: ``$AIRFLOW_ELASTIC_RAY_VENV``, else ``<repo>/.venv-ray`` (``make ray-venv``; ray pins its own grpcio,
  protobuf and pydantic), and ``RAY_USAGE_STATS_ENABLED=0`` (no usage report leaves the machine). The tag's version
  must be the installed ray's: a node of another version cannot join a cluster (Ray checks versions at ``ray
  start``), so a mismatch fails the container (``CreateContainerConfigError``) naming both, rather than running a
  different Ray than the manifest asks for. A tag without a version (``latest``, ``nightly``) runs the installed one.
* ``alpine:3.10`` — the image of training-operator v1's ``init-pytorch`` init container; it has a command, which
  runs as given with the host's shell.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

PYTORCH_PREDICTOR = "ghcr.io/airflow-elastic/kserve-pytorch:0.21.0"
STORAGE_INITIALIZER = "kserve/storage-initializer:v0.20.0"
PYTORCH = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
INIT_PYTORCH = "alpine:3.10"
SERVING_PYTHON_ENV = "AIRFLOW_ELASTIC_SERVING_PYTHON"
RAY_VENV_ENV = "AIRFLOW_ELASTIC_RAY_VENV"
RAY_IMAGE = re.compile(r"^(?:docker\.io/)?rayproject/ray(?::(?P<tag>[\w.-]+))?$")
_VERSION = re.compile(r"^(?P<version>\d+\.\d+\.\d+)(?:-|$)")
_SERVING = Path(__file__).resolve().parent / "serving"
_REPO = Path(__file__).resolve().parents[2]


class ImageUnavailable(LookupError):
    """A built-in image whose runtime is not installed on this machine (the message says how to install it)."""


def serving_python() -> str:
    """The Python that runs model servers. Raises :class:`ImageUnavailable` when there is none."""
    configured = os.environ.get(SERVING_PYTHON_ENV)
    if configured:
        return configured
    venv = _REPO / ".venv-serving" / "bin" / "python"
    if venv.exists():
        return str(venv)
    raise ImageUnavailable(
        f'image "{PYTORCH_PREDICTOR}" needs the model-serving Python (kserve + torch), which is not installed: '
        f"run `make serving-venv` in {_REPO}, or set {SERVING_PYTHON_ENV} to a Python that has kserve and torch"
    )


def ray_environment(image: str) -> dict[str, str] | None:
    """The env a ``rayproject/ray`` container runs with (``PATH`` with Ray's environment first,
    ``RAY_USAGE_STATS_ENABLED=0``); ``None`` for other images. Raises :class:`ImageUnavailable` when Ray's environment
    is not installed or the tag names another Ray version."""
    match = RAY_IMAGE.match(image)
    if match is None:
        return None
    venv = Path(os.environ.get(RAY_VENV_ENV) or _REPO / ".venv-ray")
    installed = sorted(venv.glob("lib/python*/site-packages/ray-*.dist-info"))
    if not (venv / "bin" / "ray").exists() or not installed:
        raise ImageUnavailable(
            f'image "{image}" needs Ray\'s environment, which is not installed at {venv}: run `make ray-venv` in '
            f"{_REPO}, or set {RAY_VENV_ENV} to a virtualenv that has ray[default]"
        )
    have = installed[-1].name.removeprefix("ray-").removesuffix(".dist-info")
    wanted = _VERSION.match(match["tag"] or "")
    if wanted is not None and wanted["version"] != have:
        raise ImageUnavailable(
            f'image "{image}" asks for Ray {wanted["version"]}, but the local cluster\'s Ray environment ({venv}) has '
            f"Ray {have}: use rayproject/ray:{have} (rayVersion {have}), or point {RAY_VENV_ENV} at an environment "
            f"with Ray {wanted['version']}"
        )
    path = os.pathsep.join([str(venv / "bin"), os.path.dirname(sys.executable), "/usr/local/bin:/usr/bin:/bin"])
    return {"PATH": path, "RAY_USAGE_STATS_ENABLED": "0", "VIRTUAL_ENV": str(venv)}


def builtin_name(image: str) -> str | None:
    """``image`` if it is built in, else ``None``."""
    return image if image in (PYTORCH_PREDICTOR, STORAGE_INITIALIZER, PYTORCH, INIT_PYTORCH) else None


def builtin(image: str) -> list[str] | None:
    """The command a built-in image's entrypoint stands for, or ``None`` if ``image`` is not built in."""
    if image == PYTORCH_PREDICTOR:
        return [serving_python(), str(_SERVING / "pytorch_server.py")]
    if image == STORAGE_INITIALIZER:
        return [sys.executable, str(_SERVING / "storage_initializer.py")]
    if image == PYTORCH:
        return ["sh", "-c", 'exec "$@"', "sh"]
    return None
