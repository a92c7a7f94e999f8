"""Importing the package, building a spec and rendering must not load Airflow or the Kubernetes clients: DAG
files are parsed every 30 s, and training images install the package with ``--no-deps``."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import ROOT

HEAVY = ("airflow", "kubernetes", "kubernetes_asyncio", "jsonschema")

#: The pure packages (the import-linter contract in pyproject.toml holds their imports; this runs them).
PURE = ("contract", "kube", "training", "preemption", "waiting", "stages", "serving", "sweeps")

SCRIPT = """
import importlib, pkgutil, sys
import airflow_elastic, airflow_elastic.cli, airflow_elastic.hooks.operations, airflow_elastic.hooks.serving_operations
for package in {pure!r}:
    root = importlib.import_module("airflow_elastic." + package)
    for module in pkgutil.walk_packages(root.__path__, root.__name__ + "."):
        importlib.import_module(module.name)
from airflow_elastic import Role, TrainingGroup
from airflow_elastic.training.render import render_jobset
render_jobset(TrainingGroup("t", [Role("a", replicas=2)], image="x"))
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
print(",".join(heavy))
"""


def test_no_heavy_imports():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(heavy=set(HEAVY), pure=PURE)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "", f"loaded: {out.stdout.strip()}"


def test_contract_module_is_standard_library_only():
    out = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            f"import sys; sys.path.insert(0, {str(ROOT)!r}); import airflow_elastic.contract",
        ],
        capture_output=True,
        text=True,
    )
    # -S: no site-packages at all; the package itself and its spec still import (stdlib only).
    assert out.returncode == 0, out.stderr
