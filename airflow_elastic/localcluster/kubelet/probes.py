"""Readiness probes (exec, tcpSocket, httpGet) run on timers, with the kubelet's defaults and thresholds."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import ssl
from collections.abc import Callable, Sequence
from pathlib import Path

from airflow_elastic.localcluster.store import Obj


def _port(value: int | str, container: Obj) -> int:
    if isinstance(value, int) or str(value).isdigit():
        return int(value)
    for port in container.get("ports") or []:
        if port.get("name") == value:
            return int(port["containerPort"])
    raise ValueError(f"port {value!r} not found among the container's ports")


async def _exec(command: list[str], cwd: Path, env: dict[str, str], timeout: float, enter: Sequence[str]) -> bool:
    """``enter``: the prefix that runs the command in the pod's sandbox (:meth:`.podnet.Sandbox.enter`), if any."""
    proc = await asyncio.create_subprocess_exec(
        *enter,
        *command,
        cwd=str(cwd),
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        return await asyncio.wait_for(proc.wait(), timeout) == 0
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        return False


async def _http(probe: Obj, host: str, port: int, timeout: float) -> bool:
    secure = probe.get("scheme", "HTTP").upper() == "HTTPS"
    context = None
    if secure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the kubelet does not verify probe certificates either
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=context), timeout)
    try:
        headers = {"Host": f"{host}:{port}", "User-Agent": "kube-probe/1.33", "Accept": "*/*", "Connection": "close"}
        for header in probe.get("httpHeaders") or []:
            headers[header["name"]] = header["value"]
        request = f"GET {probe.get('path') or '/'} HTTP/1.1\r\n"
        request += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        writer.write(request.encode())
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), timeout)
        parts = line.decode("latin-1").split()
        return len(parts) >= 2 and parts[1].isdigit() and 200 <= int(parts[1]) < 400
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def probe_once(
    probe: Obj, container: Obj, pod_ip: str, cwd: Path, env: dict[str, str], enter: Sequence[str] = ()
) -> bool:
    """One probe attempt; any error counts as a failure."""
    timeout = float(probe.get("timeoutSeconds") or 1)
    try:
        if "exec" in probe:
            return await _exec(list(probe["exec"].get("command") or []), cwd, env, timeout, enter)
        if "tcpSocket" in probe:
            spec = probe["tcpSocket"]
            host, port = spec.get("host") or pod_ip, _port(spec["port"], container)
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return True
        if "httpGet" in probe:
            spec = probe["httpGet"]
            return await _http(spec, spec.get("host") or pod_ip, _port(spec["port"], container), timeout)
    except (OSError, ValueError, TimeoutError):
        return False
    return False


async def readiness_loop(
    probe: Obj,
    container: Obj,
    pod_ip: str,
    cwd: Path,
    env: dict[str, str],
    set_ready: Callable[[bool], None],
    enter: Sequence[str] = (),
) -> None:
    """Probe every ``periodSeconds`` after ``initialDelaySeconds``; report readiness changes through
    ``set_ready`` once ``successThreshold`` / ``failureThreshold`` consecutive results agree. Runs until
    cancelled (when the container stops)."""
    period = float(probe.get("periodSeconds") or 10)
    success_needed = int(probe.get("successThreshold") or 1)
    failure_needed = int(probe.get("failureThreshold") or 3)
    await asyncio.sleep(float(probe.get("initialDelaySeconds") or 0))
    successes = failures = 0
    while True:
        if await probe_once(probe, container, pod_ip, cwd, env, enter):
            successes, failures = successes + 1, 0
            if successes >= success_needed:
                set_ready(True)
        else:
            successes, failures = 0, failures + 1
            if failures >= failure_needed:
                set_ready(False)
        await asyncio.sleep(period)
