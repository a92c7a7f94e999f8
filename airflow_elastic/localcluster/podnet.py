"""Pod network namespaces on Linux: each pod its own network stack, pods on one bridge per cluster.

On a cluster every pod has its own network namespace, shared by all its containers (the kubelet creates the pod
sandbox, then joins each container to it: ``pkg/kubelet/kuberuntime/kuberuntime_sandbox.go``, the CRI's
``RunPodSandbox``; a CNI plugin such as ``bridge`` gives it an interface and an IP, containernetworking/plugins
``plugins/main/bridge/bridge.go``). That is what this module builds, where the OS allows it (mode ``netns``):

* **The cluster's bridge.** At start the server claims one ``/16`` among ``10.128.0.0/16`` … ``10.255.0.0/16`` by
  creating the Linux bridge ``aelc<i>`` (interface names are unique, so two clusters starting at once never claim
  the same subnet) with the gateway address ``10.<128+i>.0.1`` and a MAC of its own, fixed (else the kernel takes
  its lowest port's, which changes as pods come and go); subnets that overlap a host route are skipped. The
  bridge's alias records its owner (pid, start time, state directory): a bridge whose owner is gone (a crashed
  server) is deleted by the next cluster that starts, and a server deletes its own at stop.
* **A pod's sandbox.** Before its first container (init containers included), the kubelet creates a network and
  a UTS namespace (``unshare`` in a short-lived thread of the server, which keeps them open by file descriptor,
  as the pause container does), a veth pair (``ae<i>-<hex>`` on the bridge, ``eth0`` in the pod) and gives
  ``eth0`` the pod IP (``status.podIP``) in the cluster's subnet and a MAC derived from it, ``lo`` up. No default
  route: pods reach each other, the host (the gateway address, where the API server also listens for in-cluster
  clients) and nothing beyond (no NAT; the outside world is unreachable at once, not after a timeout). Every
  container process, each restart and exec probes enter the sandbox (``nsenter --net --uts``), so containers of
  one pod share ``localhost`` and a port binds once per pod, as on a cluster. With the cluster DNS
  (:mod:`.clusterdns`) the sandbox also has a private mount namespace in which the pod's ``resolv.conf``
  (``ClusterFirst``) is bound on ``/etc/resolv.conf``; containers enter it too (``--mount``).
* **The pod's hostname** (``socket.gethostname()`` in the pod's UTS namespace) is its IP: the cluster DNS has no
  record for a bare pod name, and distributed frameworks advertise their hostname to their peers (torchrun's c10d
  rendezvous, ``RendezvousStoreInfo.build``; gloo's default device resolves it to choose its address; torchft's
  managers). The IP resolves everywhere without a resolver. ``HOSTNAME`` stays the pod's hostname.
* **The end.** The sandbox is released (its descriptors closed: the kernel then removes the namespaces and the
  veth pair) when the pod's containers have all ended or it is deleted; a successor with the same DNS identity,
  which gets the same IP (:mod:`.network`), takes the address over: the predecessor, still terminating, loses its
  interface.

Where this is not possible (not Linux, not root: a veth into the host's network needs ``CAP_NET_ADMIN`` there,
which a rootless user namespace does not give; no ``ip``/``nsenter``), pods share the host's network (mode
``loopback``, :mod:`.network`). :func:`choose` decides, and says why.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

NETNS, LOOPBACK, AUTO = "netns", "loopback", "auto"
MODES = (AUTO, NETNS, LOOPBACK)
BRIDGE_PREFIX = "aelc"
#: Subnet ``i`` is ``10.<FIRST_OCTET + i>.0.0/16``.
FIRST_OCTET, SUBNETS = 128, 128
_CLONE_NEWNET, _CLONE_NEWUTS, _CLONE_NEWNS = 0x40000000, 0x04000000, 0x00020000
_MS_BIND, _MS_REC, _MS_PRIVATE = 0x1000, 0x4000, 0x40000
#: The cluster's DNS domain (kubelet ``--cluster-domain``).
DOMAIN = "cluster.local"
RESOLV_CONF = "/etc/resolv.conf"
_LOCK = Path(tempfile.gettempdir()) / "airflow-elastic-localcluster-net.lock"


def subnet(index: int) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(f"10.{FIRST_OCTET + index}.0.0/16")


def gateways() -> list[str]:
    """Every gateway address a cluster may listen on (the server certificate names them all)."""
    return [str(subnet(i).network_address + 1) for i in range(SUBNETS)]


def _ip(*args: str, netns: str | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = ["ip", *args] if netns is None else ["nsenter", f"--net={netns}", "ip", *args]
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)


def _check(result: subprocess.CompletedProcess[str]) -> None:
    if result.returncode != 0:
        raise OSError(f"{' '.join(result.args)}: {result.stderr.strip()}")


def unavailable() -> str | None:
    """Why pod network namespaces cannot be used here, or None when they can."""
    if not sys.platform.startswith("linux"):
        return f"{sys.platform} has no network namespaces"
    if os.geteuid() != 0:
        users = Path("/proc/sys/user/max_user_namespaces")
        rootless = users.exists() and users.read_text().strip() != "0"
        note = " (user namespaces are available, but they isolate pods without connecting them)" if rootless else ""
        return f"not root: a pod's veth into the host's network needs CAP_NET_ADMIN in the host's namespace{note}"
    missing = [tool for tool in ("ip", "nsenter") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not found (iproute2, util-linux)"
    try:
        Sandbox.create("").close()
    except OSError as err:
        return f"cannot create a network namespace: {err}"
    return None


def choose(requested: str) -> tuple[str, str]:
    """The network mode to run with and why: ``requested`` (``auto``, ``netns`` or ``loopback``)."""
    if requested not in MODES:
        raise ValueError(f"network mode {requested!r} is not one of {', '.join(MODES)}")
    if requested == LOOPBACK:
        hint = "; --network netns gives each pod its own network namespace" if unavailable() is None else ""
        return LOOPBACK, f"pods share the host's network, each with a loopback IP{hint}"
    reason = unavailable()
    if reason is None:
        return NETNS, "a network namespace per pod (Linux, root)"
    if requested == NETNS:
        raise OSError(f"network mode netns is not available: {reason}")
    return LOOPBACK, f"pods share the host's network, each with a loopback IP: {reason}"


def _start_ticks(pid: int) -> int:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(raw[raw.rindex(")") + 2 :].split()[19])


def _bridges() -> dict[str, dict[str, object]]:
    """Our bridges on this host and their owners (from their alias)."""
    result = _ip("-j", "link", "show", "type", "bridge")
    found: dict[str, dict[str, object]] = {}
    for link in json.loads(result.stdout or "[]"):
        name = link.get("ifname", "")
        if name.startswith(BRIDGE_PREFIX) and name[len(BRIDGE_PREFIX) :].isdigit():
            try:
                found[name] = json.loads(link.get("ifalias") or "{}")
            except ValueError:
                found[name] = {}
        continue
    return found


def _owner_alive(owner: dict[str, object]) -> bool:
    pid, start = owner.get("pid"), owner.get("start")
    return isinstance(pid, int) and isinstance(start, int) and _start_ticks(pid) == start


def _routed() -> list[ipaddress.IPv4Network]:
    out = []
    for route in json.loads(_ip("-j", "-4", "route", "show", "table", "all").stdout or "[]"):
        dst = route.get("dst", "")
        if dst and dst != "default" and not route.get("dev", "").startswith(BRIDGE_PREFIX):
            with contextlib.suppress(ValueError):
                out.append(ipaddress.IPv4Network(dst if "/" in dst else f"{dst}/32", strict=False))
    return out


def mac(ip: str) -> str:
    """The pod interface's MAC, derived from its IP (the CNI plugins' ``0a:58`` + IP, containernetworking/plugins
    ``pkg/utils/hwaddr``): a successor taking an IP over answers at the MAC its peers' ARP caches hold."""
    return "0a:58:" + ":".join(f"{octet:02x}" for octet in ipaddress.IPv4Address(ip).packed)


def resolv_conf(namespace: str, server: str) -> str:
    """A pod's ``/etc/resolv.conf`` under the ``ClusterFirst`` DNS policy (kubelet ``pkg/kubelet/network/dns``)."""
    return f"search {namespace}.svc.{DOMAIN} svc.{DOMAIN} {DOMAIN}\nnameserver {server}\noptions ndots:5\n"


def _errno_error(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


class Sandbox:
    """A pod's network and UTS namespaces, and with a cluster DNS a mount namespace whose ``/etc/resolv.conf`` is
    the pod's, held open by descriptor (the pause container's role)."""

    def __init__(self, net_fd: int, uts_fd: int, mnt_fd: int = -1):
        self.net_fd, self.uts_fd, self.mnt_fd = net_fd, uts_fd, mnt_fd
        self.veth = ""

    @classmethod
    def create(cls, hostname: str, resolv: Path | None = None) -> Sandbox:
        """New namespaces (``unshare`` in a thread of their own: namespaces belong to a thread, and this one
        leaves them again); ``lo`` is brought up later with the pod's address. With ``resolv``, a mount
        namespace, private (nothing mounted in it reaches the host), with that file bound on ``/etc/resolv.conf``."""
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
        out: dict[str, object] = {}
        kinds = ("net", "uts", "mnt") if resolv else ("net", "uts")

        def make() -> None:
            if libc.unshare(_CLONE_NEWNET | _CLONE_NEWUTS | (_CLONE_NEWNS if resolv else 0)) != 0:
                out["error"] = _errno_error("unshare")
                return
            if hostname:
                libc.sethostname(hostname.encode(), len(hostname.encode()))
            if resolv:
                if libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
                    out["error"] = _errno_error("making the pod's mounts private")
                    return
                if libc.mount(str(resolv).encode(), RESOLV_CONF.encode(), None, _MS_BIND, None) != 0:
                    out["error"] = _errno_error(f"binding {resolv} on {RESOLV_CONF}")
                    return
            out["fds"] = tuple(os.open(f"/proc/thread-self/ns/{ns}", os.O_RDONLY) for ns in kinds)
            # The thread ends here; its namespaces live on through the descriptors.

        thread = threading.Thread(target=make, name="pod-sandbox")
        thread.start()
        thread.join()
        if "error" in out:
            raise out["error"]  # type: ignore[misc]
        fds: tuple[int, ...] = out["fds"]  # type: ignore[assignment]
        return cls(*fds)

    @property
    def net_path(self) -> str:
        return f"/proc/{os.getpid()}/fd/{self.net_fd}"

    def enter(self, cwd: Path | str) -> list[str]:
        """The command prefix that runs a program in this sandbox, in ``cwd`` (``nsenter`` then execs it: same
        pid; entering a mount namespace moves to its root, hence ``--wd``)."""
        prefix = ["nsenter", f"--net={self.net_path}", f"--uts=/proc/{os.getpid()}/fd/{self.uts_fd}"]
        if self.mnt_fd >= 0:
            prefix += [f"--mount=/proc/{os.getpid()}/fd/{self.mnt_fd}", f"--wd={cwd}"]
        return [*prefix, "--"]

    def close(self) -> None:
        """Let the namespaces go: once no process is in them the kernel removes them, and the veth pair with them
        (deleting the veth here would block for tens of milliseconds)."""
        for fd in (self.net_fd, self.uts_fd, self.mnt_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.net_fd = self.uts_fd = self.mnt_fd = -1


@dataclass
class PodNetwork:
    """The cluster's bridge and its pods' sandboxes (see the module docstring)."""

    index: int
    state_dir: Path

    @property
    def bridge(self) -> str:
        return f"{BRIDGE_PREFIX}{self.index}"

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        return subnet(self.index)

    @property
    def gateway(self) -> str:
        return str(self.subnet.network_address + 1)

    def __post_init__(self) -> None:
        #: Where the pods' ``resolv.conf`` files are, once the cluster DNS serves (:mod:`.clusterdns`).
        self.resolv_dir: Path | None = None
        self._by_ip: dict[str, Sandbox] = {}
        self._serial = 0
        self._lock = threading.Lock()  # attach runs in worker threads

    @classmethod
    def up(cls, state_dir: Path) -> PodNetwork:
        """Delete bridges of servers that are gone (this directory's previous run among them) and claim a subnet."""
        owner = {"pid": os.getpid(), "start": _start_ticks(os.getpid()), "state_dir": str(state_dir)}
        with _LOCK.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            bridges = _bridges()
            for name, info in bridges.items():
                if not _owner_alive(info):
                    _ip("link", "del", name)
            taken = {int(n[len(BRIDGE_PREFIX) :]) for n in _bridges()}
            routed = _routed()
            for index in range(SUBNETS):
                if index in taken or any(subnet(index).overlaps(r) for r in routed):
                    continue
                net = cls(index, state_dir)
                # A fixed MAC: the kernel gives a bridge whose address was never set the lowest MAC among its
                # ports (net/bridge/br_stp_if.c, br_stp_recalculate_bridge_id: "user has chosen a value so keep
                # it" only for NET_ADDR_SET), so the gateway's MAC would change as pods come and go, and a pod whose
                # ARP cache held the old one could not reach the gateway for up to half a minute (Docker's bridge
                # driver sets a MAC at creation for this reason).
                created = _ip(
                    "link", "add", net.bridge, "address", mac(net.gateway), "type", "bridge", "forward_delay", "0"
                )
                if created.returncode != 0:
                    continue  # claimed by a cluster that does not take the lock (an older version): next
                try:
                    _check(_ip("link", "set", net.bridge, "alias", json.dumps(owner, separators=(",", ":"))))
                    _check(_ip("addr", "add", f"{net.gateway}/16", "dev", net.bridge))
                    _check(_ip("link", "set", net.bridge, "up"))
                except OSError:
                    _ip("link", "del", net.bridge)
                    raise
                return net
        raise OSError(f"no free subnet for pods among 10.{FIRST_OCTET}.0.0/16 to 10.255.0.0/16")

    def down(self) -> None:
        """Remove every sandbox (their veths go with their namespaces) and the bridge."""
        for sandbox in list(self._by_ip.values()):
            sandbox.close()
        self._by_ip.clear()
        _ip("link", "del", self.bridge)

    def attach(self, ip: str, namespace: str = "default") -> Sandbox:
        """A new sandbox with address ``ip`` on the bridge, resolving names of ``namespace`` first if the cluster
        has a DNS; a sandbox still holding ``ip`` (a terminating predecessor with the same DNS identity) loses its
        interface."""
        resolv = None
        if self.resolv_dir is not None:
            resolv = self.resolv_dir / f"{namespace}.conf"
            if not resolv.exists():
                tmp = resolv.with_suffix(f".{threading.get_ident()}.tmp")
                tmp.write_text(resolv_conf(namespace, self.gateway))
                tmp.replace(resolv)
        with self._lock:
            previous = self._by_ip.pop(ip, None)
            self._serial += 1
            serial = self._serial
        if previous is not None and previous.veth:
            _ip("link", "del", previous.veth)
            previous.veth = ""
        sandbox = Sandbox.create(ip, resolv)
        try:
            veth = f"ae{self.index}-{os.getpid() % 0x1000:03x}{serial % 0x10000:04x}"
            host = (
                f"link add {veth} type veth peer name eth0 address {mac(ip)} netns {sandbox.net_path}\n"
                f"link set {veth} master {self.bridge} up\n"
            )
            _check(_ip("-batch", "-", stdin=host))
            sandbox.veth = veth
            pod = f"link set lo up\naddr add {ip}/16 dev eth0\nlink set eth0 up\n"
            _check(_ip("-batch", "-", netns=sandbox.net_path, stdin=pod))
        except OSError:
            if sandbox.veth:
                _ip("link", "del", sandbox.veth)
            sandbox.close()
            raise
        with self._lock:
            self._by_ip[ip] = sandbox
        return sandbox

    def detach(self, ip: str, sandbox: Sandbox) -> None:
        with self._lock:
            if self._by_ip.get(ip) is sandbox:
                del self._by_ip[ip]
        sandbox.close()

    def add_address(self, ip: str) -> None:
        """An address of the host on the bridge (a Service's virtual IP, :mod:`.kubeproxy`): pods reach it on their
        link; it goes with the bridge."""
        _check(_ip("addr", "add", f"{ip}/32", "dev", self.bridge))

    def remove_address(self, ip: str) -> None:
        _ip("addr", "del", f"{ip}/32", "dev", self.bridge)

    def describe(self) -> dict[str, str]:
        return {"mode": NETNS, "bridge": self.bridge, "subnet": str(self.subnet), "gateway": self.gateway}


def wait_gone(name: str, timeout: float = 2.0) -> bool:
    """Whether interface ``name`` is gone (within ``timeout``): for tests of the clean-up."""
    deadline = time.monotonic() + timeout
    while _ip("link", "show", name).returncode == 0:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
