"""Airflow as separate, real processes (api-server, scheduler with the LocalExecutor, dag-processor, triggerer),
for what ``airflow dags test`` cannot show: a triggerer restarted mid-wait, a worker killed mid-task.

:class:`AirflowDeployment` starts the components the way ``airflow standalone`` does (LocalExecutor on SQLite,
SimpleAuthManager), but each as its own session, with its own log file, on a free port, with short heartbeats
and a short task-instance heartbeat timeout, so a test can stop, kill and restart them one by one and is sure
to leave no process behind: every component is started in a new session, and :meth:`AirflowDeployment.close`
kills whatever still runs in those sessions (LocalExecutor workers and task processes included, which put
themselves in process groups of their own).

The metadata DB is read with short-lived read-only SQLite connections (:func:`query`) while Airflow writes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tests.support.airflow_env import AIRFLOW, tail

T = TypeVar("T")

#: The components of a deployment, in start order (the api-server serves the Execution API the workers call).
COMPONENTS = ("api-server", "dag-processor", "scheduler", "triggerer")
#: Seconds a worker may go without a heartbeat before the scheduler fails (and retries) its task instance.
TASK_HEARTBEAT_TIMEOUT = 12
#: Seconds a component waits for SQLite's write lock before its statement fails (Python's default is 5).
SQLITE_BUSY_TIMEOUT = 30


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def deployment_environment(base: dict[str, str], *, dags_folder: Path, api_port: int) -> dict[str, str]:
    """``base`` (an :func:`~tests.support.airflow_env.airflow_environment`) made into a multi-process deployment.

    What ``airflow standalone`` forces (LocalExecutor, SimpleAuthManager) plus: one JWT secret shared by the
    api-server and the workers, the Execution API on ``api_port``, DAGs unpaused at creation, no log-serving
    ports (they would clash with other tests), and heartbeats of a second or two so that a dead worker or
    triggerer is noticed within seconds rather than minutes.

    SQLite lets one writer in at a time, and Python's ``sqlite3`` gives up after 5 s waiting for the lock: four
    components heartbeating every second on a loaded machine exceeded that once (a ``PATCH .../hitlDetails``
    answered HTTP 500 "Database error"). Every component waits up to :data:`SQLITE_BUSY_TIMEOUT` instead, through
    ``[database] sql_alchemy_connect_args`` naming a module in ``$AIRFLOW_HOME/config`` (on Airflow's ``sys.path``).
    """
    config = Path(base["AIRFLOW_HOME"]) / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "deployment_db.py").write_text(f"CONNECT_ARGS = {{'timeout': {SQLITE_BUSY_TIMEOUT}}}\n")
    return {
        **base,
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "deployment_db.CONNECT_ARGS",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": "deployment_db.CONNECT_ARGS",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "2",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
        "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC": "1",
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(TASK_HEARTBEAT_TIMEOUT),
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "1",
        "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "120",
        "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
        "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
        "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "6",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "60",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    }


#: Tries of a REST call the api-server answered 500 "Database error" (SQLite locked by another writer).
DB_ERROR_ATTEMPTS = 3


def query(db: Path, sql: str, *args: Any, attempts: int = 20) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` from the SQLite DB ``db``, read-only; retried while a writer holds the lock."""
    for attempt in range(attempts):
        connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return connection.execute(sql, args).fetchall()
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or attempt == attempts - 1:
                raise
        finally:
            connection.close()
        time.sleep(0.2)
    raise AssertionError("unreachable")


def session_processes(sessions: Iterable[int]) -> dict[int, str]:
    """``pid → command line`` of every live process whose session id is one of ``sessions``."""
    wanted = set(sessions)
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # Fields after the parenthesised command: state, ppid, pgrp, session, ...
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] == "Z" or int(fields[3]) not in wanted:
                continue
            found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return found


@dataclass
class Component:
    """One Airflow process (``airflow <name>``) and its log file."""

    name: str
    log: Path
    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        """The last ``lines`` lines of the log, without the api-server's access log (one line per request)."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return tail("\n".join(line for line in text.splitlines() if "[http.access]" not in line), lines)

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 30.0) -> int | None:
        """Send ``sig``, wait up to ``timeout`` seconds, then SIGKILL; returns the exit code."""
        if self.alive:
            self.process.send_signal(sig)
            try:
                return self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()


@dataclass
class AirflowDeployment:
    """Airflow's components as separate processes sharing one environment (see the module docstring).

    Use it as a context manager: on exit every component is stopped (SIGTERM, then SIGKILL) and every process
    left in their sessions is killed. :attr:`leftovers` then lists what had to be killed that way.
    """

    home: Path
    env: dict[str, str]
    db: Path
    components: dict[str, Component] = field(default_factory=dict)
    #: Session ids of every process ever started (killed or restarted ones included).
    sessions: set[int] = field(default_factory=set)
    #: ``pid → command line`` of the processes :meth:`close` found still running after the components stopped.
    leftovers: dict[int, str] = field(default_factory=dict)
    _generation: dict[str, int] = field(default_factory=dict)

    @property
    def api_url(self) -> str:
        return self.env["AIRFLOW__API__BASE_URL"]

    def __enter__(self) -> AirflowDeployment:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self, name: str) -> Component:
        """Start ``airflow <name>`` (a fresh log file per start: ``<name>.<n>.log`` in ``home``)."""
        generation = self._generation.get(name, 0) + 1
        self._generation[name] = generation
        log = self.home / f"{name}.{generation}.log"
        command = [AIRFLOW, name]
        if name == "api-server":
            port = self.api_url.rsplit(":", 1)[1]
            command += ["--host", "127.0.0.1", "--port", port, "--workers", "1"]
        elif name in ("scheduler", "triggerer"):
            command.append("--skip-serve-logs")
        with log.open("wb") as out:
            process = subprocess.Popen(
                command,
                env=self.env,
                cwd=self.home,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.sessions.add(process.pid)
        self.components[name] = Component(name, log, process)
        return self.components[name]

    def start_all(self, timeout: float = 120.0) -> None:
        """Start every component and wait until the Execution API answers and the jobs heartbeat."""
        for name in COMPONENTS:
            self.start(name)
        self.wait_until(self._api_healthy, timeout, "the api-server to answer /api/v2/monitor/health")
        for job_type in ("SchedulerJob", "DagProcessorJob", "TriggererJob"):
            self.wait_until(lambda t=job_type: self.running_job(t), timeout, f"a running {job_type}")

    def restart(self, name: str, sig: signal.Signals = signal.SIGTERM) -> Component:
        """Stop ``name`` with ``sig`` (waiting for it to exit) and start a new one."""
        self.components[name].stop(sig)
        return self.start(name)

    def close(self) -> None:
        """Stop every component, then kill whatever is left in their sessions (recorded in :attr:`leftovers`)."""
        # The scheduler first: its LocalExecutor waits for running tasks, which need the api-server.
        for name in ("scheduler", "triggerer", "dag-processor", "api-server"):
            if name in self.components:
                self.components[name].stop(timeout=20)
        self.leftovers = session_processes(self.sessions)
        for pid in self.leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    # ------------------------------------------------------------------------------------------ observing

    def _api_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.api_url + "/api/v2/monitor/health", timeout=5) as response:
                return response.status == 200
        except OSError:
            return False

    def running_job(self, job_type: str) -> int | None:
        """The id of the newest ``job_type`` job that is running and heartbeat in the last few seconds."""
        rows = query(
            self.db,
            "SELECT id FROM job WHERE job_type = ? AND state = 'running' "
            "AND latest_heartbeat > datetime('now', '-10 seconds') ORDER BY id DESC LIMIT 1",
            job_type,
        )
        return rows[0][0] if rows else None

    def logs(self, names: Iterable[str] | None = None, lines: int = 40) -> str:
        """The tails of the components' logs (all of them by default), for assertion messages."""
        parts = []
        for name in names or self.components:
            component = self.components.get(name)
            if component is not None:
                state = "running" if component.alive else f"exited {component.process.returncode}"
                parts.append(f"----- {component.log.name} ({state}) -----\n{component.log_tail(lines)}")
        return "\n".join(parts)

    def wait_until(self, probe: Callable[[], T], timeout: float, what: str, *, extra: Callable[[], str] = str) -> T:
        """Poll ``probe`` until it returns something truthy (returned), or fail after ``timeout`` seconds with
        ``what`` and the components' log tails (plus ``extra()``, e.g. the task's own log)."""
        deadline = time.monotonic() + timeout
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{extra()}\n{self.logs()}")
            time.sleep(0.5)

    def airflow(self, *args: str, timeout: float = 120.0) -> str:
        """Run ``airflow <args>`` in this deployment's environment; its output (fails the test if it fails)."""
        result = subprocess.run(
            [AIRFLOW, *args],
            env=self.env,
            cwd=self.home,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
        assert result.returncode == 0, f"airflow {' '.join(args)} failed:\n{tail(result.stdout)}"
        return result.stdout

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """``method`` on the public REST API (``/api/v2`` + ``path``) with a JSON ``body``; the decoded reply.
        SimpleAuthManager with every user an admin: no token. Fails the test on an HTTP error, with its detail."""
        for attempt in range(DB_ERROR_ATTEMPTS):
            request = urllib.request.Request(
                f"{self.api_url}/api/v2{path}",
                data=None if body is None else json.dumps(body).encode(),
                method=method,
                headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    return json.loads(response.read() or b"null")
            except urllib.error.HTTPError as error:
                reply = error.read().decode(errors="replace")
                # SQLite has one writer: the api-server's audit-log insert, which runs before the endpoint, can find
                # the DB locked by the scheduler and answer 500 "Database error" having changed nothing.
                if error.code == 500 and '"Database error"' in reply and attempt < DB_ERROR_ATTEMPTS - 1:
                    time.sleep(1.0)
                    continue
                detail = f"{method} {path}: HTTP {error.code} {reply}"
                if error.code >= 500:  # the api-server logs the cause (and the error id the reply names)
                    detail += "\n" + self.logs(["api-server"], lines=80)
                raise AssertionError(detail) from None
        raise AssertionError("unreachable")

    def trigger(self, dag_id: str, run_id: str, conf: dict[str, Any]) -> None:
        """Create a manual run of ``dag_id`` (``POST /dags/{dag_id}/dagRuns``) once the dag-processor has put the
        DAG in the DB."""
        self.wait_until(
            lambda: query(self.db, "SELECT 1 FROM serialized_dag WHERE dag_id = ?", dag_id),
            90,
            f"the dag-processor to serialize {dag_id}",
        )
        self.api("POST", f"/dags/{dag_id}/dagRuns", {"dag_run_id": run_id, "logical_date": None, "conf": conf})

    # ------------------------------------------------------------------------------------- task instances

    def task_states(self, dag_id: str) -> str:
        """Every task instance of ``dag_id``: its run, state and try, one per line (for failure messages)."""
        rows = query(
            self.db,
            "SELECT run_id, task_id, state, try_number FROM task_instance WHERE dag_id = ? ORDER BY run_id, task_id",
            dag_id,
        )
        return "\n".join(f"{run} {task}: {state} (try {number})" for run, task, state, number in rows)

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        """The task instance's ``id`` (UUID string), ``state`` and ``try_number`` (empty if not created yet)."""
        rows = query(
            self.db,
            "SELECT id, state, try_number FROM task_instance WHERE dag_id = ? AND run_id = ? AND task_id = ?",
            dag_id,
            run_id,
            task_id,
        )
        if not rows:
            return {}
        ti_id, state, try_number = rows[0]
        return {"id": _uuid(ti_id), "state": state, "try_number": try_number}

    def parked(self, dag_id: str, run_id: str, task_id: str) -> bool:
        """Whether the scheduler has taken in the executor's report that the workload of a human-in-the-loop task
        ended with it parked (``awaiting_input``): only then may a test answer it. An answer before that loses a race
        in Airflow 3.3 (the same as the defer race): the scheduler re-queues the resumed task, then takes the late
        report of the parking workload's end ("success") for a state changed externally and fails the task. A
        person never answers within that second; a test does."""
        finished = f"TaskInstance Finished: dag_id={dag_id}, task_id={task_id}, run_id={run_id}, "
        for log in sorted(self.home.glob("scheduler.*.log")):
            text = log.read_text(errors="replace")
            if any(finished in line and "state=awaiting_input," in line for line in text.splitlines()):
                return True
        return False

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
        """The task log of one try (as the supervisor wrote it), empty if there is none yet."""
        path = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        try:
            return (path / f"attempt={try_number}.log").read_text(errors="replace")
        except OSError:
            return ""

    def trigger_log(self, dag_id: str, run_id: str, task_id: str, try_number: int, triggerer_job: int) -> str:
        """What the triggerer job ``triggerer_job`` logged for the try's trigger, empty if nothing yet."""
        path = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        try:
            return (path / f"attempt={try_number}.log.trigger.{triggerer_job}.log").read_text(errors="replace")
        except OSError:
            return ""

    def worker_processes(self, ti_id: str) -> dict[int, str]:
        """``pid → command line`` of the LocalExecutor worker (the task's supervisor) and the task process
        running task instance ``ti_id``: both name the task instance's id in their process title."""
        scheduler = self.components["scheduler"]
        return {pid: cmd for pid, cmd in session_processes([scheduler.pid]).items() if ti_id in cmd}

    def kill_worker(self, ti_id: str) -> dict[int, str]:
        """SIGKILL the task instance's worker as a lost machine would lose it: no signal handler, no ``on_kill``,
        no final state report. Both processes are stopped first so neither sees the other die."""
        victims = self.worker_processes(ti_id)
        assert victims, f"no worker process runs task instance {ti_id}\n{self.logs(['scheduler'])}"
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in victims:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        return victims


def _uuid(value: Any) -> str:
    """A task instance id as the process titles print it (SQLite stores it as 32 hex digits)."""
    text = str(value).replace("-", "")
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}" if len(text) == 32 else str(value)
