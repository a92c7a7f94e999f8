"""The RayJob controller's client of a Ray head's dashboard, as KubeRay v1.7.0's
``ray-operator/controllers/ray/utils/dashboardclient/dashboard_httpclient.go`` (``GetJobInfo``, ``SubmitJobReq``,
``StopJob``; ``JobPath`` ``/api/jobs/``), with ``RayHTTPClientDirectTimeoutSeconds`` (2 s) per request.

KubeRay reaches the dashboard at ``status.dashboardURL`` (``<head svc>.<ns>.svc.cluster.local:8265``) through the
cluster's DNS. Here the name is resolved as the kubelet resolves it for pods (:mod:`.network`, :mod:`.endpoints`):
the headless Service's first endpoint (ready ones first), its pod IP and the Service port's target port; the
dashboard binds that address (:mod:`.rayports`). Requests are asynchronous, so a slow head holds only the RayJob
controller's own queue, never the server's loop.
"""

from __future__ import annotations

import json
import re
from typing import Any

import aiohttp

from airflow_elastic.localcluster import endpoints
from airflow_elastic.localcluster.resources import SERVICES
from airflow_elastic.localcluster.store import Store

TIMEOUT_SECONDS = 2.0  # utils.RayHTTPClientDirectTimeoutSeconds
JOB_PATH = "/api/jobs/"
_URL = re.compile(r"^(?:http://)?(?P<svc>[a-z0-9-]+)\.(?P<ns>[a-z0-9-]+)\.svc(?:\.cluster\.local)?:(?P<port>\d+)$")


class DashboardError(Exception):
    """The dashboard could not be reached or answered with an error."""


class JobNotFound(DashboardError):
    """``GetJobInfo``'s ``BadRequest``: the dashboard answered 404 for the job."""


def resolve(store: Store, url: str) -> str:
    """``http://<pod IP>:<port>`` of the dashboard a ``dashboardURL`` names; :class:`DashboardError` if none."""
    found = _URL.match(url)
    if found is None:
        raise DashboardError(f"dashboard URL {url!r} is not <service>.<namespace>.svc[.cluster.local]:<port>")
    service = store.find(SERVICES, found["ns"], found["svc"])
    if service is None:
        raise DashboardError(f'service "{found["svc"]}" not found')
    port = next((p for p in service["spec"].get("ports") or [] if p.get("port") == int(found["port"])), None)
    members = sorted(endpoints.members(store, service), key=lambda m: not endpoints.is_ready(m[0]))
    for pod, _ in members:
        number = endpoints.target_port(pod, port) if port is not None else int(found["port"])
        if number is not None:
            return f"http://{pod['status']['podIP']}:{number}"
    raise DashboardError(f'no endpoints available for service "{found["svc"]}"')


async def _request(method: str, url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_SECONDS)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.request(method, url, json=body) as reply,
        ):
            text = await reply.text()
            status = reply.status
    except (aiohttp.ClientError, OSError, TimeoutError) as err:
        raise DashboardError(f"{method} {url}: {err or type(err).__name__}") from err
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


async def get_job_info(base: str, job_id: str) -> dict[str, Any]:
    """``GetJobInfo``: Ray's job details (``status``, ``message``, ``start_time``/``end_time`` in ms, ...)."""
    status, data = await _request("GET", f"{base}{JOB_PATH}{job_id}")
    if status == 404:
        raise JobNotFound(f"Job {job_id} does not exist on the cluster")
    if not isinstance(data, dict):
        raise DashboardError(f"GetJobInfo fail: {data}")
    return data


async def submit_job(base: str, request: dict[str, Any]) -> str:
    """``SubmitJobReq``: ``POST /api/jobs/``; the submission id."""
    status, data = await _request("POST", f"{base}{JOB_PATH}", request)
    if status != 200 or not isinstance(data, dict):
        raise DashboardError(f"SubmitJob fail: {status} {data}")
    return str(data.get("submission_id") or data.get("job_id") or "")


async def stop_job(base: str, job_id: str) -> None:
    """``StopJob``: ``POST /api/jobs/<id>/stop``; an error unless stopped or already terminal."""
    _, data = await _request("POST", f"{base}{JOB_PATH}{job_id}/stop")
    if isinstance(data, dict) and data.get("stopped"):
        return
    info = await get_job_info(base, job_id)
    if info.get("status") not in ("STOPPED", "SUCCEEDED", "FAILED"):
        raise DashboardError(f"failed to stop job: {info}")
