"""What a DAG using ``TrainingGroupOperator`` costs to parse, as ratios against DAGs that only use ``airflow.sdk``.

Airflow's dag processor re-imports every DAG file periodically (default every 30 s), so an operator that drags in
the Kubernetes clients at import time makes every DAG that uses it slower to parse. Each variant below is a small
DAG file; each measurement runs it in a fresh interpreter and times, inside that interpreter, importing the file and
building its DAG (interpreter start-up excluded).

Variants:

* ``sdk``: a DAG with one ``@task`` (only ``airflow.sdk``) — the baseline;
* ``training_group``: a DAG with a ``TrainingGroup`` and a ``TrainingGroupOperator``;
* ``cncf_job``: a DAG with the cncf provider's ``KubernetesJobOperator`` (for comparison).

Usage: ``python bench/parse_cost.py [--repeat 15]``. Prints the median per variant and the ratios to ``sdk``
(goal: ``training_group`` <= 1.02x). Variants are interleaved so machine noise hits them alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

DAGS = {
    "sdk": """
from airflow.sdk import DAG, task
with DAG("parse_sdk", schedule=None):
    @task
    def train():
        return 1
    train()
""",
    "training_group": """
from airflow.sdk import DAG
from airflow_elastic import Resources, Role, RunOptions, SuccessPolicy, TrainingGroup
from airflow_elastic.operators import TrainingGroupOperator
group = TrainingGroup(
    name="tiny-trainer",
    image="ghcr.io/airflow-elastic/tiny-trainer:0.1.0",
    roles=[Role("leader", resources=Resources(cpu="500m")), Role("worker", replicas=2)],
    success=SuccessPolicy(roles=("leader",)),
    env={"TRAIN_STEPS": "{{ params.steps }}"},
)
with DAG("parse_training_group", schedule=None):
    TrainingGroupOperator(task_id="train", group=group, options=RunOptions(kubernetes_conn_id="local_cluster"))
""",
    "cncf_job": """
from airflow.sdk import DAG
from airflow.providers.cncf.kubernetes.operators.job import KubernetesJobOperator
with DAG("parse_cncf_job", schedule=None):
    KubernetesJobOperator(task_id="train", image="python:3.11-slim", cmds=["python", "-c", "pass"])
""",
}

#: Runs in the child: time importing the DAG file (a fresh module), report seconds and heavy modules loaded.
PROBE = """
import json, runpy, sys, time
start = time.perf_counter()
runpy.run_path(sys.argv[1])
elapsed = time.perf_counter() - start
heavy = sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0] in ("kubernetes", "kubernetes_asyncio")})
print(json.dumps({"seconds": elapsed, "heavy": heavy}))
"""


def measure(path: Path, env: dict[str, str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, env=env, check=True, timeout=300
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
        files = {}
        for variant, source in DAGS.items():
            files[variant] = home / f"{variant}.py"
            files[variant].write_text(source)
        for path in files.values():  # warm the OS file cache and Airflow's first-run config
            measure(path, env)
        times: dict[str, list[float]] = {v: [] for v in DAGS}
        heavy: dict[str, list[str]] = {}
        for _ in range(args.repeat):
            for variant, path in files.items():
                result = measure(path, env)
                times[variant].append(result["seconds"])
                heavy[variant] = result["heavy"]
    base = statistics.median(times["sdk"])
    print(f"DAG file import + parse, median of {args.repeat} fresh interpreters each")
    for variant, samples in times.items():
        median = statistics.median(samples)
        loaded = ", ".join(heavy[variant]) or "none"
        print(
            f"  {variant:15s} {median * 1000:8.1f} ms  {median / base:5.2f}x sdk   kubernetes clients loaded: {loaded}"
        )
    ratio = statistics.median(times["training_group"]) / base
    print(f"training_group / sdk = {ratio:.3f} (goal <= 1.02)")


if __name__ == "__main__":
    main()
