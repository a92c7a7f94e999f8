"""Streaming endpoints: watches (JSON lines fed by the store's queues) and container logs.

A watch blocks on its queue: no polling. Bookmarks are sent only when the queue is drained, so a bookmark's
resourceVersion never runs ahead of an undelivered event. A too-old resourceVersion is reported in-stream as an
ERROR event carrying a 410 Status, as the real server does for watches.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiohttp import web

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.api.handlers import Target, flag, selectors
from airflow_elastic.localcluster.config import log_path
from airflow_elastic.localcluster.resources import PODS
from airflow_elastic.localcluster.store import Store

DEFAULT_WATCH_SECONDS = 1800  # the real server's minRequestTimeout
LOG_FOLLOW_INTERVAL = 0.2
#: Where a streaming endpoint leaves its prepared response on the request: a stream the client closes cancels the
#: handler, and the request log still records what was sent (``ApiServer._middleware``).
STREAM = "stream"


class Stream(web.StreamResponse):
    """A chunked reply that counts the body bytes it wrote (:attr:`sent`), also when the client closes it first."""

    sent = 0

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        self.sent += len(data)
        await super().write(data)


def _line(event: str, obj: Any) -> bytes:
    return json.dumps({"type": event, "object": obj}).encode() + b"\n"


async def watch(request: web.Request, store: Store, target: Target, bookmark_seconds: float) -> web.StreamResponse:
    res, query = target.res, request.query
    labels, fields = selectors(request, res)
    if target.name:  # GET .../{name}?watch=1 watches one object
        fields = _and(fields, lambda o, n=target.name: o["metadata"]["name"] == n)
    timeout = float(query.get("timeoutSeconds") or DEFAULT_WATCH_SECONDS)
    bookmarks = flag(request, "allowWatchBookmarks")
    since = query.get("resourceVersion")
    initial_end = flag(request, "sendInitialEvents")
    if initial_end:
        since = None
    response = Stream(headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    await response.prepare(request)
    request[STREAM] = response
    try:
        stream = store.watch(res, target.namespace, since, labels, fields)
    except errors.Gone as err:
        await response.write(_line("ERROR", err.status()))
        return response
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        if initial_end:
            while not stream.queue.empty():
                item = stream.queue.get_nowait()
                if item is None:
                    return response
                await response.write(_line(*item))
            if bookmarks:
                await response.write(_line("BOOKMARK", _bookmark(store, target, initial_end=True)))
        while (left := deadline - loop.time()) > 0:
            try:
                item = await asyncio.wait_for(stream.queue.get(), min(left, bookmark_seconds))
            except TimeoutError:
                if bookmarks and loop.time() < deadline:
                    await response.write(_line("BOOKMARK", _bookmark(store, target)))
                continue
            if item is None:  # the store ended every watch (shutdown, injected fault)
                break
            await response.write(_line(*item))
    finally:
        store.stop_watch(stream)
    with contextlib.suppress(ConnectionError):
        await response.write_eof()
    return response


def _and(first: Any, second: Any) -> Any:
    return lambda obj: first(obj) and second(obj)


def _bookmark(store: Store, target: Target, initial_end: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": store.resource_version}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {"kind": target.res.kind, "apiVersion": target.res.api_version, "metadata": meta}


# ---------------------------------------------------------------------------------------------------- logs

# The CRI log format the real kubelet writes: "<RFC3339Nano> <stream> <P|F> <text>".
_CRI = re.compile(r"^(\S+) (stdout|stderr) ([PF]) (.*)$", re.DOTALL)


#: Log file -> ``[(end offset, when the server first saw the bytes up to it)]``: a plain line's stable timestamp.
_FIRST_SEEN: dict[Path, list[tuple[int, datetime]]] = {}


def _first_seen(path: Path, size: int, now: datetime, *, whole: bool = True) -> list[tuple[int, datetime]]:
    """The marks of ``path`` once its first ``size`` bytes were seen (``whole``: all of it, so a shorter file was
    replaced or truncated; else a followed part of it)."""
    marks = _FIRST_SEEN.get(path) or []
    if whole and marks and marks[-1][0] > size:  # the file was replaced or truncated
        marks = []
    if not marks or marks[-1][0] < size:
        marks.append((size, now))
    _FIRST_SEEN[path] = marks
    return marks


def _parse(
    raw: bytes, written: datetime, marks: list[tuple[int, datetime]] | None = None, base: int = 0
) -> list[tuple[datetime, str]]:
    """Lines with their timestamps: the CRI format's own, else when the server first saw them (``marks``), else
    ``written``.

    The process kubelet appends plain stdout/stderr, which carries no per-line time. A real kubelet stamps every
    line, and clients depend on it (``timestamps=true`` with ``sinceTime`` to resume a log, ``sinceSeconds``), so
    a plain line gets the time this server first read it (the same on every later read), or the time a followed
    chunk was read: never earlier than the real write, so a ``since`` filter may repeat a line but never drops one.
    ``base`` is where ``raw`` starts in the file (a followed chunk), for ``marks``.
    """
    lines: list[tuple[datetime, str]] = []
    partial = ""
    offset, mark = base, 0
    for line in re.findall(rb"[^\n]*\n|[^\n]+$", raw):
        while marks and mark < len(marks) - 1 and marks[mark][0] <= offset:
            mark += 1
        stamp_plain = marks[mark][1] if marks else written
        offset += len(line)
        line = line.decode(errors="replace")
        m = _CRI.match(line.rstrip("\n"))
        if not m:
            lines.append((stamp_plain, line))
            continue
        stamp = datetime.fromisoformat(re.sub(r"(\.\d{6})\d+", r"\1", m.group(1)).replace("Z", "+00:00"))
        if m.group(3) == "P":
            partial += m.group(4)
            continue
        lines.append((stamp, partial + m.group(4) + "\n"))
        partial = ""
    return lines


def _render(lines: list[tuple[datetime, str]], timestamps: bool, since: datetime | None) -> bytes:
    out = []
    for stamp, text in lines:
        if since is not None and stamp < since:
            continue
        prefix = stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ ") if timestamps else ""
        out.append(prefix + text)
    return "".join(out).encode()


def _log_options(request: web.Request, pod: dict[str, Any]) -> tuple[str, datetime | None]:
    query, name = request.query, pod["metadata"]["name"]
    containers = [c["name"] for c in (pod.get("spec", {}).get("containers") or [])]
    init = [c["name"] for c in (pod.get("spec", {}).get("initContainers") or [])]
    container = query.get("container")
    if not container:
        if len(containers) != 1:
            choices = " ".join(containers)
            raise errors.BadRequest(f"a container name must be specified for pod {name}, choose one of: [{choices}]")
        container = containers[0]
    if container not in containers + init:
        raise errors.BadRequest(f"container {container} is not valid for pod {name}")
    if flag(request, "previous"):
        raise errors.BadRequest(f'previous terminated container "{container}" in pod "{name}" not found')
    since = None
    if "sinceSeconds" in query:
        since = datetime.now(UTC) - timedelta(seconds=int(query["sinceSeconds"]))
    elif "sinceTime" in query:
        since = datetime.fromisoformat(query["sinceTime"].replace("Z", "+00:00"))
    return container, since


async def logs(request: web.Request, store: Store, target: Target, state_dir: Path) -> web.StreamResponse:
    """``pods/{name}/log``: the container's log file as the kubelet wrote it (empty before it starts)."""
    pod = store.get(PODS, target.namespace, target.name or "")
    container, since = _log_options(request, pod)
    query = request.query
    meta = pod["metadata"]
    path = log_path(state_dir, meta["namespace"], meta["name"], meta["uid"], container)
    timestamps = flag(request, "timestamps")
    raw = path.read_bytes() if path.exists() else b""
    lines = _parse(raw, datetime.now(UTC), _first_seen(path, len(raw), datetime.now(UTC)))
    if "tailLines" in query:
        tail = int(query["tailLines"])
        lines = lines[-tail:] if tail > 0 else []
    body = _render(lines, timestamps, since)
    limit = int(query.get("limitBytes") or 0)
    if limit:
        body = body[:limit]
    if not flag(request, "follow"):
        return web.Response(body=body, content_type="text/plain")
    response = Stream(headers={"Content-Type": "text/plain", "Transfer-Encoding": "chunked"})
    await response.prepare(request)
    request[STREAM] = response
    await response.write(body)
    offset = len(raw)
    while True:
        current = store.find(PODS, meta["namespace"], meta["name"])
        running = (
            current is not None
            and current["metadata"]["uid"] == meta["uid"]
            and current.get("status", {}).get("phase") not in ("Succeeded", "Failed")
        )
        size = path.stat().st_size if path.exists() else 0
        if size > offset:
            with path.open("rb") as f:
                f.seek(offset)
                chunk = f.read(size - offset)
            cut = chunk.rfind(b"\n") + 1 if running else len(chunk)  # only whole lines while still writing
            if cut:  # stamped as a later read of the file stamps them: a stream resumed by sinceTime agrees
                marks = _first_seen(path, offset + cut, datetime.now(UTC), whole=False)
                lines = _parse(chunk[:cut], datetime.now(UTC), marks, base=offset)
                await response.write(_render(lines, timestamps, since))
                offset += cut
        elif not running:
            break
        await asyncio.sleep(LOG_FOLLOW_INTERVAL)
    with contextlib.suppress(ConnectionError):
        await response.write_eof()
    return response
