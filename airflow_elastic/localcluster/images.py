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
* ``alpine:3.10`` — the image of training-operator v1's ``init-pytorch`` init container; it has a command, which
  runs as given with the host's shell.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PYTORCH_PREDICTOR = "ghcr.io/airflow-elastic/kserve-pytorch:0.21.0"
STORAGE_INITIALIZER = "kserve/storage-initializer:v0.20.0"
PYTORCH = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
INIT_PYTORCH = "alpine:3.10"
SERVING_PYTHON_ENV = "AIRFLOW_ELASTIC_SERVING_PYTHON"
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
