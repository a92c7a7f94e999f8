"""A group's rendezvous port on one host: moved per rendezvous, because torch's store binds all interfaces.

Only where pods share the host's network (mode ``loopback``, and ``hostNetwork`` pods); with a network namespace per
pod (mode ``netns``, :mod:`.podnet`) each pod has its own ports, as on a cluster, and nothing is moved.

On a real cluster every pod has its own network namespace, so the Kubeflow Trainer can fix the rendezvous port of
every TrainJob at 29500 (``PET_MASTER_PORT``, kubeflow/trainer ``pkg/runtime/framework/plugins/torch/torch.go``,
``EnforceMLPolicy``), the training-operator at its Master's port (release-1.9
``pkg/controller.v1/pytorch/envvar.go``, ``setPodEnv``) and a JobSet group at its ``coordinator_port``
(``MASTER_PORT``, 29500 by default). The local cluster gives each pod a loopback IP instead (:mod:`.network`): a
server that binds its pod IP is alone on its port, but torch's ``TCPStore`` server (torchrun's agent on node rank
0, ``init_process_group``'s ``env://`` store on rank 0, c10d's ``TCPStoreLibUvBackend``) binds ``0.0.0.0``/``::``,
which fails with ``EADDRINUSE`` while any process of the host listens on that port on any address: another
group's coordinator on 29500, another TrainJob, another local cluster on the same machine (two test sessions run
side by side).

So, as it rewrites DNS names, the kubelet rewrites the port. A pod's rendezvous is torchrun's
``PET_RDZV_ENDPOINT`` (``host:port``, an elastic PyTorchJob's: training-operator release-1.9
``pkg/controller.v1/pytorch/elastic.go``) when its backend (``PET_RDZV_BACKEND``) is ``c10d`` or torchrun's default
``static``, whose agent on the endpoint's host serves the store there (an ``etcd`` endpoint is an outside server,
left alone); else the first of these address and port pairs it has (both set, the port a number): torchrun's
``PET_MASTER_ADDR``/``PET_MASTER_PORT`` (Trainer, training-operator), torch's ``MASTER_ADDR``/``MASTER_PORT`` (a
JobSet group's contract), the contract's ``AE_COORDINATOR_ADDR``/``AE_COORDINATOR_PORT``. Its port becomes one
derived from the cluster, the namespace, the rendezvous address (as written, before DNS rewriting) and the port, the
same in every pod of that rendezvous; every other ``*_PORT`` variable of the pod holding the same port follows
(``MASTER_PORT``, a coordinator port: in one pod on a real cluster one port is one listener), and so does the
endpoint's port. Env values only, before ``$(VAR)`` expansion in the command:
a port written literally in the command (``--master-port 29500``) is left alone. The pod object keeps its env.

torchft's servers bind all interfaces too, so a fault-tolerant group's ports move the same way
(``airflow_elastic.contract.torchft``): the lighthouse's, from the address and port of ``TORCHFT_LIGHTHOUSE`` (its
URL is rewritten, and in the lighthouse pod ``TORCHFT_LIGHTHOUSE_PORT`` holding that port follows, which its
``--bind`` expands); each replica group's manager port ``TORCHFT_MANAGER_PORT``, from the replica group's rendezvous
address (its pod 0) and that port, so the replica groups of one JobSet never share it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

STORE_ADDR, STORE_PORT = "PET_MASTER_ADDR", "PET_MASTER_PORT"
#: torchrun's rendezvous endpoint, and the backends whose agent serves the store at it (torchrun defaults to static).
ENDPOINT, BACKEND, STORE_BACKENDS = "PET_RDZV_ENDPOINT", "PET_RDZV_BACKEND", ("c10d", "static")
#: Where a pod's rendezvous is, most specific first: torchrun's, torch's (``env://``), the contract's coordinator.
RENDEZVOUS = ((STORE_ADDR, STORE_PORT), ("MASTER_ADDR", "MASTER_PORT"), ("AE_COORDINATOR_ADDR", "AE_COORDINATOR_PORT"))
#: torchft's variables (``airflow_elastic.contract.torchft``; the local cluster imports only what it needs to know).
LIGHTHOUSE, LIGHTHOUSE_PORT, MANAGER_PORT = "TORCHFT_LIGHTHOUSE", "TORCHFT_LIGHTHOUSE_PORT", "TORCHFT_MANAGER_PORT"
_URL = re.compile(r"^(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<host>[^/:]+):(?P<port>\d+)(?P<rest>/.*)?$")
#: The ports rendezvous move to: below Linux's default ephemeral range (32768-60999), clear of 29500.
PORTS = range(20000, 29000)


def store_port(cluster: str, namespace: str, address: str, port: int) -> int:
    """The port that rendezvous ``address:port`` of ``namespace`` uses on cluster ``cluster`` (its state dir)."""
    digest = hashlib.sha256(f"{cluster}|{namespace}|{address}|{port}".encode()).digest()
    return PORTS[int.from_bytes(digest[:4], "big") % len(PORTS)]


def rendezvous(env: Mapping[str, str]) -> tuple[str, str] | None:
    """The pod's rendezvous ``(address, port)`` as its env declares it (see the module docstring), or None."""
    if (endpoint := _endpoint(env)) is not None:
        return endpoint
    for addr_name, port_name in RENDEZVOUS:
        address, port = env.get(addr_name, ""), env.get(port_name, "")
        if address and port.isdigit():
            return address, port
    return None


def with_store_port(env: Mapping[str, str], *, cluster: str, namespace: str) -> dict[str, str]:
    """``env`` with the pod's rendezvous port moved (see the module docstring); unchanged without one."""
    out = dict(env)
    found = rendezvous(env)
    if found is None:
        return out | _torchft_ports(env, ("", ""), cluster=cluster, namespace=namespace)
    address, port = found
    moved = str(store_port(cluster, namespace, address, int(port)))
    for name, value in env.items():
        if name.endswith("_PORT") and value == port:
            out[name] = moved
    if _endpoint(env) == found:
        out[ENDPOINT] = f"{address}:{moved}"
    return out | _torchft_ports(env, found, cluster=cluster, namespace=namespace)


def _torchft_ports(
    env: Mapping[str, str], rendezvous: tuple[str, str], *, cluster: str, namespace: str
) -> dict[str, str]:
    """The lighthouse's and this replica group's manager ports, moved (see the module docstring)."""
    out: dict[str, str] = {}
    if (url := _URL.match(env.get(LIGHTHOUSE, ""))) is not None:
        port = url["port"]
        moved = str(store_port(cluster, namespace, url["host"], int(port)))
        out[LIGHTHOUSE] = f"{url['scheme']}{url['host']}:{moved}{url['rest'] or ''}"
        if env.get(LIGHTHOUSE_PORT) == port:
            out[LIGHTHOUSE_PORT] = moved
    manager = env.get(MANAGER_PORT, "")
    if manager.isdigit() and rendezvous[0]:
        out[MANAGER_PORT] = str(store_port(cluster, namespace, f"{rendezvous[0]}#torchft-manager", int(manager)))
    return out


def _endpoint(env: Mapping[str, str]) -> tuple[str, str] | None:
    """``PET_RDZV_ENDPOINT`` as ``(host, port)`` when its backend serves the store there."""
    host, _, port = env.get(ENDPOINT, "").rpartition(":")
    if host and port.isdigit() and (env.get(BACKEND) or "static") in STORE_BACKENDS:
        return host, port
    return None
