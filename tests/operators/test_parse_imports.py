"""Parsing a DAG file with a training group and ``TrainingGroupOperator`` loads only the few ``airflow_elastic``
modules a DAG needs; what only a running task needs (classification, evidence, state, attempts, identity,
rendering, the hooks, checkpoints) is imported when the task runs. Airflow re-parses DAG files every 30 s."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT

#: What parsing may load: the package and specs (group, batch stage; Airflow's provider discovery loads these for
#: any DAG), the validation a group runs when it is built, and the operator with its attempts mixin.
ALLOWED = {
    "airflow_elastic",
    "airflow_elastic._aliases",
    "airflow_elastic.kube",
    "airflow_elastic.training",
    "airflow_elastic.stages",
    "airflow_elastic.waiting",
    "airflow_elastic.operators.training",
    "airflow_elastic.contract",
    "airflow_elastic.get_provider_info",
    "airflow_elastic.kube.names",
    "airflow_elastic.operators",
    "airflow_elastic.operators.training.resubmission",
    "airflow_elastic.operators.training.training_group",
    "airflow_elastic.operators.lineage",  # the OpenLineage mixin: imports the lineage code and the provider on call
    "airflow_elastic.waiting.outage",  # pure and import-free: the operators' api_outage_tolerance default
    "airflow_elastic.waiting.settings",  # RunOptions and WaitSettings (pure)
    "airflow_elastic.operators.training.arguments",  # the deprecated keywords, mapped onto them
    "airflow_elastic.training.backends",  # BACKENDS, checked at parse time
    "airflow_elastic.kube.platforms",
    "airflow_elastic.kube.schemas",
    "airflow_elastic.training.spec",
    "airflow_elastic.stages.spec",
    "airflow_elastic.training.validation",
    "airflow_elastic.training.rulebook",  # validation's rules, split by what they check
    "airflow_elastic.training.role_rules",
    "airflow_elastic.training.policy_rules",
    "airflow_elastic.training.fault_tolerance",  # FaultTolerance, part of the spec
    "airflow_elastic.contract.torchft",  # torchft's environment names, which its rules check
}
#: Loaded by neither the Task SDK nor a DAG using the operator (unlike yaml, jsonschema, fsspec: the SDK loads those).
HEAVY = ("kubernetes", "kubernetes_asyncio")

PROBE = """
import json, runpy, sys
runpy.run_path(sys.argv[1])
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("airflow_elastic",) + tuple(sys.argv[2:]))))
"""


def bench_dag(variant: str) -> str:
    """The DAG source ``bench/parse_cost.py`` measures, so the test checks what the benchmark times."""
    spec = importlib.util.spec_from_file_location("parse_cost", ROOT / "bench" / "parse_cost.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.DAGS[variant]


def test_parsing_a_dag_loads_only_what_a_dag_needs(tmp_path: Path):
    dag = tmp_path / "dag.py"
    dag.write_text(bench_dag("training_group"))
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "home"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(dag), *HEAVY], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert {m for m in loaded if m.startswith("airflow_elastic")} - ALLOWED == set()
    assert {m.split(".")[0] for m in loaded} & set(HEAVY) == set()
    assert "airflow_elastic.operators.training.training_group" in loaded  # the probe really built the operator
