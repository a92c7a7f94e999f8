"""Importing the package, building a spec and rendering must not load Airflow or the Kubernetes clients: DAG
files are parsed every 30 s, and training images install the package with ``--no-deps``."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

HEAVY = ("airflow", "kubernetes", "kubernetes_asyncio", "jsonschema")

SCRIPT = """
import sys
import airflow_elastic, airflow_elastic.render, airflow_elastic.cli, airflow_elastic.contract, airflow_elastic.state
import airflow_elastic.classify, airflow_elastic.checkpoints, airflow_elastic.evidence, airflow_elastic.templating
import airflow_elastic.render.manifest, airflow_elastic.watch, airflow_elastic.logcursor, airflow_elastic.saved
import airflow_elastic.cascade, airflow_elastic.logfollow, airflow_elastic.serving, airflow_elastic.rollout
import airflow_elastic.hooks.serving_operations
from airflow_elastic import Role, TrainingGroup
from airflow_elastic.render import render_jobset
render_jobset(TrainingGroup("t", [Role("a", replicas=2)], image="x"))
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
print(",".join(heavy))
"""


def test_no_heavy_imports():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(heavy=set(HEAVY))], capture_output=True, text=True, check=True
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
