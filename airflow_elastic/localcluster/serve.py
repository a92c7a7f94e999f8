"""The local cluster's server process: ``python -m airflow_elastic.localcluster.serve --state-dir DIR``.

One process per state directory (an exclusive lock on ``server.lock``). On start it reuses the directory's
token and objects, listens on 127.0.0.1 (a port chosen by the OS unless ``--port``), writes ``kubeconfig`` and
``ready.json`` and prints the ready line on stdout. SIGTERM/SIGINT stop it in order: no new requests, shutdown
hooks (e.g. pod processes), controllers, watches, store.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import fcntl
import ipaddress
import json
import logging
import os
import signal
import ssl
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO

import yaml
from aiohttp import web

from airflow_elastic.localcluster import podnet
from airflow_elastic.localcluster.api.server import ApiServer
from airflow_elastic.localcluster.config import ClusterConfig, NodePool
from airflow_elastic.localcluster.credentials import KUBECONFIG_FILE, kubeconfig, token, write_private

log = logging.getLogger(__name__)

READY_FILE = "ready.json"
LOCK_FILE = "server.lock"
CONFIG_FILE = "config.json"
CERT_FILE = "server.crt"
KEY_FILE = "server.key"


class AlreadyRunning(RuntimeError):
    pass


def lock(state_dir: Path) -> IO[str]:
    """Hold ``server.lock`` for the process's lifetime; a second server on the same directory fails here."""
    handle = (state_dir / LOCK_FILE).open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as err:
        handle.seek(0)
        owner = handle.read().strip() or "unknown"
        raise AlreadyRunning(f"a local cluster server (pid {owner}) is already running on {state_dir}") from err
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def load_config(state_dir: Path) -> ClusterConfig:
    """``config.json`` in the state directory (written by :class:`LocalCluster`), else the default cluster."""
    path = state_dir / CONFIG_FILE
    if not path.exists():
        return ClusterConfig()
    data = json.loads(path.read_text())
    pools = data.pop("pools", None)
    if pools is not None:
        data["pools"] = tuple(NodePool(**{**p, "taints": tuple(p.get("taints") or ())}) for p in pools)
    return ClusterConfig(**data)


def config_json(config: ClusterConfig) -> str:
    return json.dumps(dataclasses.asdict(config), indent=2)


def _names(cert_path: Path) -> set[str]:
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}


def certificate(state_dir: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and every pod gateway address a cluster may listen on
    (:func:`.podnet.gateways`), kept so kubeconfigs stay valid across restarts (one made before pod namespaces,
    without the gateways, is replaced once).

    kubectl does not send a bearer token over plain http, so the server speaks TLS."""
    cert_path, key_path = state_dir / CERT_FILE, state_dir / KEY_FILE
    addresses = ["127.0.0.1", *podnet.gateways()]
    if cert_path.exists() and key_path.exists() and set(addresses) <= _names(cert_path):
        return cert_path, key_path
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "airflow-elastic-local")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName(
                [*(x509.IPAddress(ipaddress.ip_address(a)) for a in addresses), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    write_private(key_path, key_pem.decode())
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def _on_stdin(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """The parent closed our stdin (it stopped or died): shut down like on SIGTERM."""
    if not os.read(sys.stdin.fileno(), 4096):
        loop.remove_reader(sys.stdin.fileno())
        stop.set()


def pod_network(state_dir: Path, requested: str) -> tuple[podnet.PodNetwork | None, dict[str, str]]:
    """The cluster's pod network (None: pods share the host's) and what ``ready.json`` says of it."""
    mode, reason = podnet.choose(requested)
    if mode == podnet.LOOPBACK:
        return None, {"mode": mode, "reason": reason}
    try:
        net = podnet.PodNetwork.up(state_dir)
    except OSError as err:
        if requested == podnet.NETNS:
            raise
        return None, {"mode": podnet.LOOPBACK, "reason": f"pods share the host's network: {err}"}
    return net, {**net.describe(), "reason": reason}


async def run(args: argparse.Namespace) -> None:
    state_dir = Path(args.state_dir).resolve()
    config = load_config(state_dir)
    net, network = pod_network(state_dir, args.network or config.network)
    try:
        await _serve(args, state_dir, config, net, network)
    finally:
        if net is not None:
            net.down()


async def _serve(
    args: argparse.Namespace,
    state_dir: Path,
    config: ClusterConfig,
    net: podnet.PodNetwork | None,
    network: dict[str, str],
) -> None:
    server = ApiServer(
        state_dir,
        token(state_dir),
        config,
        history=args.history,
        bookmark_seconds=args.bookmark_seconds,
        pod_network=net,
    )
    cert_path, key_path = certificate(state_dir)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert_path, key_path)
    runner = web.AppRunner(server.app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port, shutdown_timeout=1.0, ssl_context=tls)
    await site.start()
    port = runner.addresses[0][1]
    url = f"https://127.0.0.1:{port}"
    server.address = f"127.0.0.1:{port}"
    if net is not None:  # in-cluster clients in pod namespaces reach the server on the bridge
        pod_site = web.TCPSite(runner, net.gateway, 0, shutdown_timeout=1.0, ssl_context=tls)
        await pod_site.start()
        server.pod_address = f"{net.gateway}:{runner.addresses[-1][1]}"
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if args.stop_with_stdin:
        loop.add_reader(sys.stdin.fileno(), _on_stdin, loop, stop)
    write_private(
        state_dir / KUBECONFIG_FILE,
        yaml.safe_dump(kubeconfig(url, server.token, cert_path.read_bytes()), sort_keys=False),
    )
    ready = {
        "pid": os.getpid(),
        "url": url,
        "port": port,
        "kubeconfig": str(state_dir / KUBECONFIG_FILE),
        "ca": str(cert_path),
        "network": network,
    }
    write_private(state_dir / READY_FILE, json.dumps(ready))
    sys.stdout.write(json.dumps(ready) + "\n")
    sys.stdout.flush()
    log.info("local cluster API server listening on %s (state in %s)", url, state_dir)
    log.info("pod network: %s (%s)", network["mode"], network["reason"])
    await stop.wait()
    log.info("stopping the local cluster API server")
    with contextlib.suppress(FileNotFoundError):
        (state_dir / READY_FILE).unlink()
    server.store.close_watches()  # watch responses end, so the runner's graceful shutdown is quick
    await runner.cleanup()
    await server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a local cluster's API server.")
    parser.add_argument("--state-dir", required=True, help="directory for objects, token, kubeconfig and logs")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: chosen by the OS)")
    parser.add_argument("--history", type=int, default=20000, help="watch events kept for resuming watches")
    parser.add_argument("--bookmark-seconds", type=float, default=60.0, help="interval of watch BOOKMARK events")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--network", choices=podnet.MODES, help="pod network mode (default: the config's, auto)")
    parser.add_argument("--stop-with-stdin", action="store_true", help="stop when stdin closes (parent gone)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    state_dir = Path(args.state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    try:
        handle = lock(state_dir)
    except AlreadyRunning as err:
        sys.stderr.write(f"error: {err}\n")
        return 2
    try:
        asyncio.run(run(args))
    finally:
        handle.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
