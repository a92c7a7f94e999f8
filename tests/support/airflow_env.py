"""Run Airflow as a user would (``airflow dags test`` in a subprocess) and read the outcome from its metadata DB.

Everything an Airflow subprocess sees is given explicitly by :func:`airflow_environment`: its home, DAGs folder,
SQLite DB and connections. Nothing is inherited from the developer's Airflow or Kubernetes setup: ``AIRFLOW_*``,
``KUBECONFIG`` and in-cluster variables are dropped, and ``HOME`` is an empty directory, so a hook that falls back
to ``~/.kube/config`` fails loudly instead of reaching some real cluster.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

#: The Airflow CLI of the interpreter running the tests (the project's virtualenv).
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
DAGS_FOLDER = Path(__file__).resolve().parents[1] / "dags"
#: The connection id the test DAGs use for the local cluster.
CLUSTER_CONN_ID = "local_cluster"
DAGS_TEST_TIMEOUT = 180.0

#: Variables that would let a subprocess reach another Airflow or another cluster than the test's.
_DROPPED = ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")


def airflow_environment(
    home: Path, db: Path, *, connections: dict[str, dict[str, Any]] | None = None
) -> dict[str, str]:
    """The environment of an Airflow subprocess using ``home`` and the SQLite DB ``db``.

    ``connections`` maps connection ids to their JSON form (``conn_type``, ``host``, ``extra``, ...), given as
    ``AIRFLOW_CONN_<ID>``.

    ``KUBECONFIG`` is deliberately unset rather than pointed at a missing file: the cncf ``KubernetesPodOperator``
    reads it in deferrable mode (``convert_config_file_to_dict``) and passes it to the trigger as ``config_dict``
    next to the connection's ``kube_config_path``, which the trigger then rejects as mutually exclusive.
    """
    user_home = home / "user-home"  # empty: no ~/.kube/config to fall back to
    user_home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW") and k not in _DROPPED}
    env.update(
        {
            "HOME": str(user_home),
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{db.resolve()}",
            # Each operator says whether it defers; the default must not decide for it.
            "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "False",
            "AIRFLOW__LOGGING__COLORED_CONSOLE_LOG": "False",
        }
    )
    for conn_id, conn in (connections or {}).items():
        env[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(conn)
    return env


def kubernetes_connection(kubeconfig: Path, namespace: str) -> dict[str, Any]:
    """A cncf ``kubernetes`` connection to the cluster of ``kubeconfig`` (extras as ``KubernetesHook`` reads them)."""
    return {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig), "namespace": namespace}}


def migrate_db(home: Path) -> Path:
    """Create and migrate a fresh metadata DB in ``home`` with ``airflow db migrate``; returns its path."""
    home.mkdir(parents=True, exist_ok=True)
    db = home / "airflow.db"
    result = subprocess.run(
        [AIRFLOW, "db", "migrate"],
        env=airflow_environment(home, db),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    if result.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed ({result.returncode}):\n{tail(result.stdout)}")
    return db


def dag_file(folder: Path, dag_id: str) -> Path | None:
    """The one file of ``folder`` that names ``dag_id`` as a string literal, or ``None`` (then Airflow parses the whole
    folder): ``dags test`` parses only that file, not every DAG file of the folder (one imports the cncf provider,
    about 2 s)."""
    if not folder.is_dir():
        return None
    found = [path for path in sorted(folder.glob("*.py")) if f'"{dag_id}"' in path.read_text()]
    return found[0] if len(found) == 1 else None


def dags_test(
    dag_id: str,
    env: dict[str, str],
    conf: dict[str, Any] | None = None,
    *,
    timeout: float = DAGS_TEST_TIMEOUT,
    logical_date: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``airflow dags test <dag_id> [logical_date]`` (one DAG run, deferred tasks' triggers run inline).

    Returns the finished process (stdout and stderr combined in ``stdout``) whatever its exit code: assert on
    :func:`task_states`, which records what really happened, and use :func:`tail` for the failure message.
    """
    command = [AIRFLOW, "dags", "test", dag_id, *([logical_date] if logical_date else [])]
    if (dagfile := dag_file(Path(env.get("AIRFLOW__CORE__DAGS_FOLDER", DAGS_FOLDER)), dag_id)) is not None:
        command += ["--dagfile-path", str(dagfile)]
    if conf is not None:
        command += ["--conf", json.dumps(conf)]
    try:
        return subprocess.run(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        output = exc.output.decode(errors="replace") if isinstance(exc.output, bytes) else exc.output or ""
        raise AssertionError(
            f"`airflow dags test {dag_id}` did not finish in {timeout:.0f} s:\n{tail(output)}"
        ) from None


def _query(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return connection.execute(sql, args).fetchall()
    finally:
        connection.close()


def task_states(db: Path, dag_id: str, run_id: str | None = None) -> dict[str, str | None]:
    """Task-instance states of ``dag_id`` in ``db`` (of ``run_id``, else of every run: a test DB holds one).

    Keys are task ids; a mapped task instance is ``"<task_id>[<map_index>]"``.
    """
    sql = "SELECT task_id, map_index, state FROM task_instance WHERE dag_id = ?"
    args: list[Any] = [dag_id]
    if run_id is not None:
        sql += " AND run_id = ?"
        args.append(run_id)
    rows = _query(db, sql, *args)
    return {(task if index < 0 else f"{task}[{index}]"): state for task, index, state in rows}


def dag_run_states(db: Path, dag_id: str) -> dict[str, str | None]:
    """``run_id → state`` of every run of ``dag_id`` in ``db``."""
    return dict(_query(db, "SELECT run_id, state FROM dag_run WHERE dag_id = ?", dag_id))


def tail(output: str, lines: int = 120) -> str:
    """The end of a subprocess's output, for assertion messages."""
    return "\n".join(output.splitlines()[-lines:])
