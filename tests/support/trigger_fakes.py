"""A small in-memory ``AsyncJobSetHookProtocol`` for trigger tests: JobSets, pods, events and logs as dicts."""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_elastic.hooks.errors import ApiUnreachable, BadRequest, NotFound
from airflow_elastic.localcluster.patch import merge_patch
from airflow_elastic.waiting.logcursor import LogRequest

JSON = dict[str, Any]
LOG_START = datetime(2026, 3, 1, 10, 0, 0, tzinfo=UTC)


def jobset(name: str, *, uid: str = "", conditions: list[JSON] | None = None, labelled: bool = True, **status) -> JSON:
    """A JobSet dict as the API returns it; ``conditions`` as ``[{"type", "status", "reason", "message"}]``."""
    labels = {"app.kubernetes.io/managed-by": "airflow-elastic"} if labelled else {}
    return {
        "metadata": {"name": name, "uid": uid or f"uid-{name}", "labels": labels},
        "spec": {"replicatedJobs": [{"name": "leader", "replicas": 1}]},
        "status": {"conditions": conditions or [], **status},
    }


def condition(kind: str, reason: str = "", message: str = "") -> JSON:
    return {"type": kind, "status": "True", "reason": reason, "message": message}


def pod(
    jobset_name: str,
    role: str,
    *,
    phase: str,
    exit_code: int | None = None,
    message: str = "",
    uid: str = "",
    index: int = 0,
    attempt: int = 0,
    conditions: list[JSON] | None = None,
) -> JSON:
    name = f"{jobset_name}-{role}-{index}-0-abcde"
    status: JSON = {"phase": phase, "conditions": conditions or []}
    if exit_code is not None:
        status["containerStatuses"] = [
            {"name": "main", "state": {"terminated": {"exitCode": exit_code, "message": message, "reason": "Error"}}}
        ]
    return {
        "metadata": {
            "name": name,
            "uid": uid or f"uid-{name}-{attempt}",
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": jobset_name,
                "jobset.sigs.k8s.io/replicatedjob-name": role,
                "jobset.sigs.k8s.io/job-index": str(index),
                "jobset.sigs.k8s.io/restart-attempt": str(attempt),
            },
        },
        "status": status,
    }


def _matches(labels: Mapping[str, str], selector: str | None) -> bool:
    for term in filter(None, (selector or "").split(",")):
        key, equals, value = term.partition("=")
        if (labels.get(key) != value) if equals else (key not in labels):  # "key": the label exists
            return False
    return True


class FakeHook:
    """Answers from dicts, counts calls per method, and can run a callback before each JobSet list.

    Attributes:
        jobsets: name -> JobSet (one namespace is enough for these tests; ``namespace`` is recorded).
        pods, events: lists returned (filtered by label / ``type=`` selectors).
        logs: pod name -> log text; line ``i`` was written at :data:`LOG_START` plus ``i`` milliseconds.
        rotated: pod name -> lines the kubelet rotated away (no longer served).
        log_errors: pod name -> the exception its log reads raise.
        log_requests: the arguments of each ``read_pod_log_chunk`` and ``stream_pod_log``.
        stream_error: what opening a log stream raises (e.g. a proxy refusing it).
        drops: for each next log stream, the lines it sends before it drops mid-line, raising ``drop_error``.
        streams_open: log streams not yet closed.
        list_errors: exceptions the next JobSet lists raise, in order.
        on_list: called with the list number (1-based) before each JobSet list answers.
        calls: method name -> number of calls.
    """

    def __init__(self) -> None:
        self.jobsets: dict[str, JSON] = {}
        self.pods: list[JSON] = []
        self.events: list[JSON] = []
        self.logs: dict[str, str] = {}
        self.rotated: dict[str, int] = {}
        self.log_errors: dict[str, BaseException] = {}
        self.log_requests: list[JSON] = []
        self.stream_error: BaseException | None = None
        self.drops: list[int] = []
        self.drop_error: BaseException = ApiUnreachable(0, "", "the stream was dropped")
        self.streams_open = 0
        self.list_errors: list[BaseException] = []
        self.get_error: BaseException | None = None
        self.on_list: Callable[[int], None] | None = None
        self.calls: Counter[str] = Counter()
        self.deleted: list[tuple[str, str, str]] = []
        self.namespaces: set[str] = set()

    async def get_namespace(self) -> str | None:
        return None

    async def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        self.calls["create_jobset"] += 1
        self.jobsets[body["metadata"]["name"]] = dict(body)
        return dict(body)

    async def get_jobset(self, namespace: str, name: str) -> JSON:
        self.calls["get_jobset"] += 1
        await asyncio.sleep(0)
        if self.get_error is not None:
            raise self.get_error
        if name not in self.jobsets:
            raise NotFound(404, "NotFound", f'jobsets "{name}" not found')
        return self.jobsets[name]

    async def list_jobsets(self, namespace: str, label_selector: str | None = None) -> list[JSON]:
        self.calls["list_jobsets"] += 1
        self.namespaces.add(namespace)
        if self.on_list is not None:
            self.on_list(self.calls["list_jobsets"])
        await asyncio.sleep(0)
        if self.list_errors:
            raise self.list_errors.pop(0)
        return [j for j in self.jobsets.values() if _matches(j["metadata"].get("labels") or {}, label_selector)]

    async def patch_jobset(self, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON:
        """A JSON merge patch (the trigger saves its evidence in an annotation)."""
        self.calls["patch_jobset"] += 1
        if name not in self.jobsets:
            raise NotFound(404, "NotFound", f'jobsets "{name}" not found')
        self.jobsets[name] = merge_patch(self.jobsets[name], dict(patch))
        return self.jobsets[name]

    async def delete_jobset(self, namespace: str, name: str, propagation: str = "Foreground") -> JSON | None:
        self.calls["delete_jobset"] += 1
        self.deleted.append((namespace, name, propagation))
        return self.jobsets.pop(name, None)

    async def list_pods(self, namespace: str, label_selector: str | None = None) -> list[JSON]:
        self.calls["list_pods"] += 1
        return [p for p in self.pods if _matches(p["metadata"]["labels"], label_selector)]

    async def list_events(self, namespace: str, field_selector: str | None = None) -> list[JSON]:
        self.calls["list_events"] += 1
        kind = (field_selector or "").removeprefix("type=")
        return [e for e in self.events if not kind or e.get("type") == kind]

    async def list_jobs(self, namespace: str, label_selector: str | None = None) -> list[JSON]:
        return []

    async def get_node(self, name: str) -> JSON | None:
        return None

    async def read_pod_log(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        since_seconds: int | None = None,
        tail_lines: int | None = None,
    ) -> str:
        self.calls["read_pod_log"] += 1
        return "".join(text for _, text in self._served(pod, container))

    async def read_pod_log_chunk(self, namespace: str, pod: str, container: str, request: LogRequest) -> str:
        """As the kubelet answers ``timestamps=true``: ``sinceTime`` in whole seconds, ``tailLines``, ``limitBytes``."""
        self.calls["read_pod_log_chunk"] += 1
        self.log_requests.append({"pod": pod, "container": container, "request": request})
        return self._chunk(pod, container, request)

    def _chunk(self, pod: str, container: str, request: LogRequest) -> str:
        since_time, limit_bytes, tail_lines = request.since_time, request.limit_bytes, request.tail_lines
        served = self._served(pod, container)
        if since_time is not None:  # the stamps sort as text once both have microseconds
            since = since_time.replace("Z", ".000000Z") if "." not in since_time else since_time
            served = [(stamp, text) for stamp, text in served if stamp >= since]
        if tail_lines is not None:
            served = served[-tail_lines:] if tail_lines else []
        body = "".join(f"{stamp} {text}" for stamp, text in served).encode()
        return body[:limit_bytes].decode(errors="replace") if limit_bytes else body.decode()

    async def stream_pod_log(self, namespace: str, pod: str, container: str, request: LogRequest) -> Any:
        """A followed log: what :meth:`read_pod_log_chunk` answers, then each line as it is logged, until the pod is
        no longer ``Running``; a stream refused with ``stream_error`` (if set), or dropped mid-line after the number
        of lines ``drops`` pops (if any) with a transport error."""
        self.calls["stream_pod_log"] += 1
        self.log_requests.append({"pod": pod, "container": container, "request": request})
        if self.stream_error is not None:
            raise self.stream_error
        text = self._chunk(pod, container, request)
        budget = self.drops.pop(0) if self.drops else None
        self.streams_open += 1
        try:
            async for data in self._streamed(pod, container, text, budget):
                yield data
        finally:
            self.streams_open -= 1

    async def _streamed(self, pod: str, container: str, text: str, budget: int | None) -> Any:
        last = ""
        while True:
            running = any(p["metadata"]["name"] == pod and p["status"]["phase"] == "Running" for p in self.pods)
            lines = text[: text.rfind("\n") + 1 if running else len(text)].splitlines(keepends=True)  # whole lines
            last = lines[-1].split(" ", 1)[0] if lines else last
            if budget is not None and budget < len(lines):
                yield "".join(lines[:budget]).encode() + lines[budget][: len(lines[budget]) // 2].encode()
                raise self.drop_error
            budget = budget - len(lines) if budget is not None else None
            data = "".join(lines).encode()
            for start in range(0, len(data), 64 * 1024):  # as a real stream hands it over: bounded chunks
                yield data[start : start + 64 * 1024]
            if not running:
                return  # the container stopped: the stream ends
            await asyncio.sleep(0.001)
            text = "".join(f"{stamp} {t}" for stamp, t in self._served(pod, container) if not last or stamp > last)

    def _served(self, pod: str, container: str | None) -> list[tuple[str, str]]:
        if pod not in self.logs:
            raise NotFound(404, "NotFound", f'pods "{pod}" not found')
        spec = next((p.get("spec") or {} for p in self.pods if p["metadata"]["name"] == pod), {})
        names = [c["name"] for c in spec.get("containers") or []]
        if container is None and len(names) > 1:  # as the API answers for a pod with a sidecar
            raise BadRequest(400, "BadRequest", f"a container name must be specified for pod {pod}")
        if pod in self.log_errors:
            raise self.log_errors[pod]
        return stamped_log(self.logs[pod])[self.rotated.get(pod, 0) :]


@functools.lru_cache(maxsize=8)
def stamped_log(log: str) -> list[tuple[str, str]]:
    """Line ``i`` of ``log`` with its timestamp, computed once per log text (a fast fake keeps the stall test fair)."""
    lines = log.splitlines(keepends=True)
    return [((LOG_START + timedelta(milliseconds=i)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), t) for i, t in enumerate(lines)]
