"""``LocalCluster``: start, reach and stop a local cluster's server process from Python (standard library only).

The server always runs as its own process, as a real cluster outlives the clients that talk to it. A cluster
started from Python also stops when its parent dies (the server watches its stdin pipe), so a crashed test
session leaves no server behind.
"""

from __future__ import annotations

import dataclasses
import json
import os
import selectors
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from airflow_elastic.localcluster.clock import ClockControl
from airflow_elastic.localcluster.config import ClusterConfig, NodePool
from airflow_elastic.localcluster.faults.client import FaultInjection


class ClusterError(RuntimeError):
    """The server process could not be started or reached (the message includes its log's tail)."""


def _terminate_pid(pid: int, timeout: float) -> None:
    """SIGTERM ``pid`` and wait for it to exit (SIGKILL after ``timeout``)."""
    deadline = time.monotonic() + timeout
    try:
        os.kill(pid, signal.SIGTERM)
        while time.monotonic() < deadline:
            os.kill(pid, 0)
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class LocalCluster(FaultInjection, ClockControl):
    """A local cluster server process (with failure injection: :class:`FaultInjection`; the CronJob controller's
    clock: :class:`~airflow_elastic.localcluster.clock.ClockControl`).

    Args:
        state_dir: where objects, token, kubeconfig, pod logs live (default: a temporary directory, removed on
            :meth:`stop`). Starting again on the same directory resumes its objects.
        nodes: node pools (default: the :class:`ClusterConfig` default pools).
        config: the whole cluster configuration (``nodes`` overrides its pools).
        history: watch events kept for resuming watches (smaller → 410 Gone sooner).
        bookmark_seconds: interval of BOOKMARK events on watches that allow them.
        startup_timeout: seconds to wait for the server to report ready.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self,
        state_dir: str | Path | None = None,
        nodes: tuple[NodePool, ...] | list[NodePool] | None = None,
        *,
        config: ClusterConfig | None = None,
        history: int | None = None,
        bookmark_seconds: float | None = None,
        startup_timeout: float = 60.0,
        log_level: str = "INFO",
    ):
        self._temporary = state_dir is None
        self.state_dir = Path(state_dir or tempfile.mkdtemp(prefix="airflow-elastic-local-")).resolve()
        if nodes is not None:
            config = dataclasses.replace(config or ClusterConfig(), pools=tuple(nodes))
        self.config = config
        self._args = ["--log-level", log_level]
        if history is not None:
            self._args += ["--history", str(history)]
        if bookmark_seconds is not None:
            self._args += ["--bookmark-seconds", str(bookmark_seconds)]
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.token = ""

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "server.log"

    def start(self, *, detach: bool = False) -> LocalCluster:
        """Start the server process and wait until it serves; raises :class:`ClusterError` if it cannot.

        By default the server stops when this process goes away (it watches its stdin pipe). With
        ``detach=True`` it keeps running until :meth:`stop` or ``airflow-elastic cluster down``.
        """
        if self.process is not None:
            return self
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.config is not None:
            config = json.dumps(dataclasses.asdict(self.config), indent=2)
            (self.state_dir / "config.json").write_text(config)
        command = [sys.executable, "-m", "airflow_elastic.localcluster.serve", "--state-dir", str(self.state_dir)]
        if not detach:
            command.append("--stop-with-stdin")
        with self.log_file.open("ab") as log:
            self.process = subprocess.Popen(
                [*command, *self._args],
                stdin=subprocess.DEVNULL if detach else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,  # a Ctrl-C meant for the parent does not skip the orderly shutdown
            )
        ready = self._wait_ready()
        self.url = ready["url"]
        self.token = (self.state_dir / "token").read_text().strip()
        if detach:
            self._temporary = False  # the caller handed the cluster over; its state must outlive us
        return self

    @classmethod
    def attach(cls, state_dir: str | Path) -> LocalCluster:
        """A handle on a server already running on ``state_dir`` (e.g. one started with ``cluster up``).

        Raises:
            ClusterError: if no server is running there.
        """
        cluster = cls(state_dir)
        ready = cluster.ready_info()
        if ready is None:
            raise ClusterError(
                f"no local cluster is running on {cluster.state_dir} (start one: airflow-elastic cluster up)"
            )
        cluster.url = ready["url"]
        cluster.token = (cluster.state_dir / "token").read_text().strip()
        return cluster

    def ready_info(self) -> dict[str, Any] | None:
        """What the running server reported (pid, url, port, kubeconfig), or None if none is running here."""
        try:
            ready = json.loads((self.state_dir / "ready.json").read_text())
            os.kill(ready["pid"], 0)
        except (FileNotFoundError, ProcessLookupError, json.JSONDecodeError, KeyError):
            return None
        return ready

    def _wait_ready(self) -> dict[str, Any]:
        assert self.process is not None and self.process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if selector.select(self.startup_timeout):
                line = self.process.stdout.readline()
                if line:
                    return json.loads(line)
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process = None
        raise ClusterError(f"the local cluster server did not start:\n{self._log_tail()}")

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no server log)"

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the server and wait for its orderly shutdown (SIGKILL after ``timeout`` seconds)."""
        process, self.process = self.process, None
        if process is None and (ready := self.ready_info()) is not None:
            _terminate_pid(ready["pid"], timeout)  # attached to a server another process started
        if process is not None:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    pipe.close()
        if self._temporary:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    @property
    def network(self) -> dict[str, str]:
        """The pod network the server runs with: ``mode`` (``netns`` or ``loopback``), ``reason``, and in mode
        ``netns`` its ``bridge``, pod ``subnet`` and ``gateway`` (the host's address on the bridge, where pods
        reach the API server)."""
        return dict((self.ready_info() or {}).get("network") or {})

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    # ---------------------------------------------------------------------------------------- request log

    def _open(self, path: str, timeout: float | None = 30):
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {self.token}"})
        context = ssl.create_default_context(cafile=str(self.state_dir / "server.crt"))
        return urllib.request.urlopen(request, timeout=timeout, context=context)

    def get(self, path: str) -> Any:
        """GET an API path (e.g. ``/api/v1/nodes``) and return the decoded JSON."""
        with self._open(path) as response:
            return json.loads(response.read())

    def stream(self, path: str) -> Iterator[str]:
        """GET an API path and yield its body as text while it arrives (e.g. logs read with ``follow``)."""
        with self._open(path, timeout=None) as response:
            while chunk := response.read1(65536):
                yield chunk.decode(errors="replace")

    def request_count(self) -> int:
        """How many requests the server has answered so far (a mark for :meth:`requests` ``since``)."""
        return int(self.get("/debug/requests?since=" + str(2**62))["total"])

    def requests(
        self,
        *,
        since: int = 0,
        verb: str | None = None,
        resource: str | None = None,
        namespace: str | None = None,
        user_agent: str | None = None,
    ) -> list[dict[str, Any]]:
        """Requests the server answered after mark ``since``: dicts with ``verb`` (get, list, watch, create,
        update, patch, delete, deletecollection), ``resource`` (e.g. ``jobsets.jobset.x-k8s.io``),
        ``subresource``, ``namespace``, ``name``, ``code``, ``bytes`` (of the reply body), ``user_agent``, ``method``,
        ``path``, ``query``, ``closed_by_client`` (a watch or followed log the client closed before the server ended
        it).
        Filters match exactly, except ``user_agent`` (a substring)."""
        items = self.get("/debug/requests?" + urllib.parse.urlencode({"since": since}))["items"]
        return [
            r
            for r in items
            if (verb is None or r["verb"] == verb)
            and (resource is None or r["resource"] == resource)
            and (namespace is None or r.get("namespace") == namespace)
            and (user_agent is None or user_agent in r["user_agent"])
        ]

    def env(self) -> dict[str, str]:
        """Environment for subprocesses (kubectl, clients) that should talk to this cluster."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
