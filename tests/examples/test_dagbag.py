"""Every example DAG file imports cleanly in a DagBag (what the dag processor does every 30 s), and only the DAG files:
``dags/.airflowignore`` keeps the pods' scripts out, which Airflow's safe mode would otherwise parse (two of them
mention both "airflow" and "dag") and so import torch and torchft in every parse, ``airflow dags test`` included."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import ROOT

SCRIPT = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
frameworks = sorted(m for m in ("torch", "torchft", "ray", "sklearn") if m in sys.modules)
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": sorted(bag.dag_ids),
                  "frameworks": frameworks}))
"""


def test_example_dags_import_without_errors(tmp_path):
    dags = str(ROOT / "dags")
    env = {
        "AIRFLOW_HOME": str(tmp_path),
        "HOME": str(tmp_path),
        "PATH": "/usr/bin:/bin",
        "AIRFLOW__CORE__DAGS_FOLDER": dags,  # Airflow puts it on sys.path, as a deployment does
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    out = subprocess.run([sys.executable, "-c", SCRIPT, dags], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["errors"] == {}
    assert result["frameworks"] == [], "parsing the DAGs folder imported a training framework (a script parsed?)"
    assert "example_training" in result["dags"]
    assert "example_batch_stage" in result["dags"]
    assert "example_batch_scoring" in result["dags"]  # scheduled on the nightly model Asset
    assert "example_sweep" in result["dags"]
    assert "example_trainjob" in result["dags"]
    assert "nightly_training" in result["dags"]
    assert {"serving_scale_day", "serving_scale_night"} <= set(result["dags"])
