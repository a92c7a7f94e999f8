"""Where things are: the repository root (``dags/``, ``tools/``, ``docker/`` ... are found from it), and the example
DAG files loaded as Airflow loads them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DAGS = ROOT / "dags"


def load_dag_file(name: str, module_name: str | None = None) -> ModuleType:
    """Execute ``dags/<name>.py`` as a module (named ``module_name``, default ``name``), with ``dags/`` on
    ``sys.path`` as Airflow puts the DAGs folder: a DAG file imports its helper modules beside it
    (``nightly_training`` imports ``nightly_promotion``)."""
    if str(DAGS) not in sys.path:
        sys.path.append(str(DAGS))
    spec = importlib.util.spec_from_file_location(module_name or name, DAGS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
