"""JobSets of one namespace through the real clients, and their conditions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.waiting import wait_for

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"

J = "jobset.sigs.k8s.io/"


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def assert_condition(obj: dict[str, Any], kind: str, status: str, reason: str, message: str | None = None) -> None:
    cond = condition(obj, kind)
    assert cond is not None, f"no {kind} condition in {obj.get('status')}"
    assert (cond["status"], cond["reason"]) == (status, reason), cond
    if message is not None:
        assert cond["message"] == message


class JobSets:
    """The JobSets of one namespace through CustomObjectsApi, plus the child objects through the core APIs."""

    def __init__(self, api_client: client.ApiClient, namespace: str):
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.ns = namespace

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, body)

    def get(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)

    def patch(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name, body)

    def exists(self, name: str) -> bool:
        try:
            self.get(name)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    def wait(self, name: str, check: Callable[[dict[str, Any]], Any], what: str, timeout: float = 30.0) -> Any:
        def probe() -> Any:
            js = self.get(name)
            return js if check(js) else None

        return wait_for(probe, timeout, what=f"{what} of JobSet {name}")

    def wait_terminal(self, name: str, timeout: float = 30.0) -> dict[str, Any]:
        return self.wait(name, lambda js: (js.get("status") or {}).get("terminalState"), "a terminal state", timeout)

    def jobs(self) -> dict[str, client.V1Job]:
        return {j.metadata.name: j for j in self.batch.list_namespaced_job(self.ns).items}

    def pods(self, selector: str = "") -> list[client.V1Pod]:
        return self.core.list_namespaced_pod(self.ns, label_selector=selector).items

    def live_pods(self, selector: str = "") -> list[client.V1Pod]:
        return [p for p in self.pods(selector) if p.metadata.deletion_timestamp is None]

    def events(self, name: str) -> list[client.CoreV1Event]:
        return self.core.list_namespaced_event(self.ns, field_selector=f"involvedObject.name={name}").items
