"""Small fakes for operator tests: a JobSet hook keeping objects in a dict, a task instance, a state store."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_elastic.hooks.errors import AlreadyExists, NotFound
from airflow_elastic.localcluster.patch import merge_patch


class FakeHook:
    """``JobSetHookProtocol`` over a dict of JobSets; ``calls`` records (method, name)."""

    def __init__(self, pods: list[dict[str, Any]] | None = None, events: list[dict[str, Any]] | None = None):
        self.jobsets: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods = pods or []
        self.events = events or []
        self.calls: list[tuple[str, str]] = []
        self.create_error: Exception | None = None

    def get_namespace(self) -> str | None:
        return None

    def get_connection_extras(self) -> dict[str, Any]:
        return {}

    def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        self.calls.append(("create", name))
        if (namespace, name) in self.jobsets:
            raise AlreadyExists(409, "AlreadyExists", f"jobsets {name} already exists")
        obj = copy.deepcopy(dict(body))
        obj["metadata"]["uid"] = str(uuid.uuid4())
        self.jobsets[(namespace, name)] = obj
        if self.create_error is not None:
            raise self.create_error  # the create happened, its reply was lost
        return copy.deepcopy(obj)

    def get_jobset(self, namespace: str, name: str) -> dict[str, Any]:
        self.calls.append(("get", name))
        if (namespace, name) not in self.jobsets:
            raise NotFound(404, "NotFound", f"jobsets {name} not found")
        return copy.deepcopy(self.jobsets[(namespace, name)])

    def patch_jobset(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append(("patch", name))
        if (namespace, name) not in self.jobsets:
            raise NotFound(404, "NotFound", f"jobsets {name} not found")
        self.jobsets[(namespace, name)] = merge_patch(self.jobsets[(namespace, name)], dict(patch))
        return copy.deepcopy(self.jobsets[(namespace, name)])

    def delete_jobset(self, namespace: str, name: str, propagation: str = "Foreground") -> dict[str, Any] | None:
        self.calls.append(("delete", name))
        return self.jobsets.pop((namespace, name), None)

    def list_pods(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        return copy.deepcopy(self.pods)

    def list_events(self, namespace: str, field_selector: str | None = None) -> list[dict[str, Any]]:
        return copy.deepcopy(self.events)

    def read_pod_log(self, namespace: str, pod: str, *args: Any, **kwargs: Any) -> str:
        return ""

    def finish(self, namespace: str, name: str, condition: str = "Completed") -> None:
        """Mark a JobSet terminal, as the JobSet controller would."""
        status = {"conditions": [{"type": condition, "status": "True", "reason": "AllJobsCompleted"}]}
        self.jobsets[(namespace, name)]["status"] = status


@dataclass
class TaskInstance:
    dag_id: str = "dag"
    task_id: str = "train"
    run_id: str = "manual__2025-01-01T00:00:00+00:00"
    map_index: int = -1
    try_number: int = 1
    start_date: Any = None
    xcoms: dict[str, Any] = field(default_factory=dict)

    pulled: dict[str, Any] = field(default_factory=dict)  # task id ("*": any other) -> its result, for xcom_pull
    max_tries: int = 0  # Airflow raises it when the task instance is cleared (``operators.reruns``)

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value

    def xcom_pull(self, task_ids: str | None = None, key: str = "return_value") -> Any:
        return self.pulled.get(task_ids or "", self.pulled.get("*"))


class StateStore(dict):
    """``task_state_store`` with a log of writes (to check the name is reserved before the create)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[dict[str, Any]] = []

    def set(self, key: str, value: Any, *, retention: Any = None) -> None:
        self[key] = json.loads(json.dumps(value))
        self.writes.append(self[key])


class Logger:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str, *args: Any) -> None:
        self.lines.append(message % args)

    warning = error = info
