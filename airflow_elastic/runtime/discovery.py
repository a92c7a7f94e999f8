"""Host discovery for elastic roles: the Ready pods of this group's elastic role, from the Kubernetes API.

Standard library only. ``python -m airflow_elastic.runtime.discovery`` prints one ``<host>:<slots>`` line per
Ready, non-terminating pod of the role — the format of Horovod elastic's ``--host-discovery-script``::

    #!/bin/sh
    exec python -m airflow_elastic.runtime.discovery

It asks the API server, not DNS: a headless Service publishes not-ready addresses (the renderer sets
``publishNotReadyAddresses`` so hostnames resolve during startup), and DNS answers lag pod deletion. Pods are
selected by JobSet's labels ``jobset-name=<AE_JOBSET>``, ``replicatedjob-name=<role>`` and, when known,
``restart-attempt=<AE_RESTART_ATTEMPT>``. ``host`` is the pod IP (``--address fqdn``:
``<hostname>.<subdomain>``); ``slots`` is ``AE_PROCESSES_PER_POD``.

Credentials are the pod's service account, as every in-cluster client reads them: ``KUBERNETES_SERVICE_HOST`` /
``KUBERNETES_SERVICE_PORT`` and ``token``, ``ca.crt`` under ``/var/run/secrets/kubernetes.io/serviceaccount``. On
the local cluster, which has no mount namespace, that directory is named by
``LOCALCLUSTER_MOUNT_VAR_RUN_SECRETS_KUBERNETES_IO_SERVICEACCOUNT`` (read first). The service account needs
``list`` on ``pods`` in its namespace (a Role + RoleBinding; see ``docker/README.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_elastic import contract

SERVICEACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: The local cluster's name for the service-account mount (its mount convention: docs/concepts/local-cluster.md).
LOCAL_SERVICEACCOUNT_ENV = "LOCALCLUSTER_MOUNT_VAR_RUN_SECRETS_KUBERNETES_IO_SERVICEACCOUNT"
#: JobSet's label prefix: a copy of ``kube.labels.JOBSET_DOMAIN``, as what runs in pods imports only the contract
#: (``tests/kube/test_kube_labels.py`` holds the two equal).
JOBSET_LABEL = "jobset.sigs.k8s.io"


class DiscoveryError(RuntimeError):
    """Hosts cannot be listed: no credentials, no group environment, or the API refused the request."""


@dataclass(frozen=True)
class Host:
    """One Ready pod of the elastic role."""

    pod: str
    ip: str
    fqdn: str
    role_rank: int
    slots: int

    def line(self, address: str = "ip") -> str:
        """``<host>:<slots>`` with the pod IP, or the pod's stable DNS name when ``address == "fqdn"``."""
        return f"{self.fqdn if address == 'fqdn' else self.ip}:{self.slots}"


@dataclass(frozen=True)
class ApiAccess:
    """Where the API server is and how to authenticate, from the pod's in-cluster credentials."""

    url: str
    token_file: Path
    ca_file: Path

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ApiAccess:
        """From the pod's ``KUBERNETES_SERVICE_*`` env and token; :class:`DiscoveryError` outside a cluster."""
        host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port:
            raise DiscoveryError("not in a cluster: KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set")
        directory = Path(env.get(LOCAL_SERVICEACCOUNT_ENV) or SERVICEACCOUNT_DIR)
        token, ca = directory / "token", directory / "ca.crt"
        if not token.is_file():
            raise DiscoveryError(
                f"no service-account token at {token} (is automountServiceAccountToken false for this pod?)"
            )
        bracketed = f"[{host}]" if ":" in host else host
        return cls(url=f"https://{bracketed}:{port}", token_file=token, ca_file=ca)

    def get(self, path: str, query: Mapping[str, str], timeout: float) -> dict[str, Any]:
        """GET a JSON object. The token is read on every call: kubelets rotate projected tokens."""
        token = self.token_file.read_text().strip()
        request = urllib.request.Request(
            f"{self.url}{path}?{urllib.parse.urlencode(query)}",
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        )
        context = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file.is_file() else None)
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
                reply: dict[str, Any] = json.loads(response.read())
                return reply
        except urllib.error.HTTPError as err:
            detail = err.read().decode("utf-8", "replace")[:500]
            raise DiscoveryError(f"GET {path} failed: HTTP {err.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as err:
            raise DiscoveryError(f"GET {path} failed: {err}") from None


def _condition_true(pod: Mapping[str, Any], kind: str) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def _ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    return (
        not pod["metadata"].get("deletionTimestamp")
        and status.get("phase") == "Running"
        and bool(status.get("podIP"))
        and _condition_true(pod, "Ready")
    )


def _host(pod: Mapping[str, Any], slots: int) -> Host:
    meta, spec = pod["metadata"], pod.get("spec") or {}
    hostname = spec.get("hostname") or meta["name"]
    subdomain = spec.get("subdomain")
    labels = meta.get("labels") or {}
    return Host(
        pod=meta["name"],
        ip=pod["status"]["podIP"],
        fqdn=f"{hostname}.{subdomain}" if subdomain else hostname,
        role_rank=int(labels.get(f"{JOBSET_LABEL}/job-index", "0") or 0),
        slots=slots,
    )


def selector(env: Mapping[str, str], role: str | None = None) -> str:
    """The label selector of the elastic role's pods in this JobSet (and this restart attempt, when known)."""
    jobset = env.get(contract.JOBSET, "")
    role = role or env.get(contract.ELASTIC_ROLE) or env.get(contract.ROLE, "")
    if not jobset or not role:
        raise DiscoveryError(f"{contract.JOBSET} and a role ({contract.ELASTIC_ROLE} or --role) are required")
    parts = [f"{JOBSET_LABEL}/jobset-name={jobset}", f"{JOBSET_LABEL}/replicatedjob-name={role}"]
    if attempt := env.get(contract.RESTART_ATTEMPT, "").strip():
        parts.append(f"{JOBSET_LABEL}/restart-attempt={attempt}")
    return ",".join(parts)


def ready_hosts(env: Mapping[str, str] | None = None, *, role: str | None = None, timeout: float = 10.0) -> list[Host]:
    """Ready, non-terminating pods of the elastic role (``role`` overrides ``AE_ELASTIC_ROLE``), by role rank.

    Raises:
        DiscoveryError: missing credentials or group environment, or the API request failed.
    """
    env = os.environ if env is None else env
    namespace = env.get(contract.NAMESPACE, "")
    if not namespace:
        raise DiscoveryError(f"{contract.NAMESPACE} is not set: not in a training group")
    slots = int(env.get(contract.PROCESSES_PER_POD, "1") or 1)
    query = {"labelSelector": selector(env, role)}
    listing = ApiAccess.from_env(env).get(f"/api/v1/namespaces/{namespace}/pods", query, timeout)
    hosts = [_host(pod, slots) for pod in listing.get("items") or [] if _ready(pod)]
    return sorted(hosts, key=lambda h: (h.role_rank, h.pod))


def main(argv: Sequence[str] | None = None) -> int:
    """Print ``<host>:<slots>`` lines (the discovery script's interface); on error a message and status 1."""
    parser = argparse.ArgumentParser(prog="python -m airflow_elastic.runtime.discovery", description=__doc__)
    parser.add_argument("--role", help="role to list (default: AE_ELASTIC_ROLE, else this pod's role)")
    parser.add_argument("--address", choices=("ip", "fqdn"), default="ip", help="pod IP (default) or DNS name")
    parser.add_argument("--timeout", type=float, default=10.0, help="API request timeout in seconds")
    args = parser.parse_args(argv)
    try:
        hosts = ready_hosts(role=args.role, timeout=args.timeout)
    except DiscoveryError as err:
        sys.stderr.write(f"host discovery failed: {err}\n")
        return 1
    sys.stdout.write("".join(f"{h.line(args.address)}\n" for h in hosts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
