"""A StatsD server on localhost for tests: what Airflow's ``Stats`` sends over UDP when ``[metrics] statsd_on``.

``airflow dags test`` subprocesses send to it once :meth:`StatsdListener.environment` is in their environment (with
``statsd_influxdb_enabled``, so that the tags arrive in the name: ``name,tag=value,...:value|type``).
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from types import TracebackType


@dataclass(frozen=True)
class Received:
    """One StatsD line: ``name`` (Airflow's ``statsd_prefix`` included), its tags, value and type (``c``, ``g``,
    ``ms``)."""

    name: str
    tags: dict[str, str]
    value: float
    type: str

    @classmethod
    def parse(cls, line: str) -> Received:
        """``name[,tag=value...]:value|type[|@rate]`` (StatsD with InfluxDB-style tags)."""
        head, _, body = line.rpartition(":")
        name, *pairs = head.split(",")
        value, kind, *_ = body.split("|")
        return cls(name, dict(pair.split("=", 1) for pair in pairs), float(value), kind)


class StatsdListener:
    """A UDP socket on 127.0.0.1 (a free port) read by a thread: every line received, in order."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name="statsd-listener", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(65535)
            except TimeoutError:
                if self._stop.is_set():  # and nothing came for a while: everything sent has been read
                    return
                continue
            except OSError:
                return
            self.lines.extend(line for line in data.decode(errors="replace").splitlines() if line)

    def environment(self) -> dict[str, str]:
        """What an Airflow process needs to send its metrics here (Airflow's StatsD client, tags in the name)."""
        return {
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(self.port),
            "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
            "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
        }

    def received(self, prefix: str = "") -> list[Received]:
        """The lines received so far whose name starts with ``prefix``, parsed."""
        return [r for r in map(Received.parse, list(self.lines)) if r.name.startswith(prefix)]

    def close(self) -> None:
        """Stop reading, once what was sent before is read (reading ends after 0.2 s without a datagram)."""
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()

    def __enter__(self) -> StatsdListener:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
