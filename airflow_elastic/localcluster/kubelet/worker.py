"""One pod's life on its node: volumes, init containers, containers with restarts, probes, termination."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol

from airflow_elastic.localcluster import errors, images, rayports
from airflow_elastic.localcluster.config import ClusterConfig, log_path, pod_dir
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.kubelet import serviceaccount
from airflow_elastic.localcluster.kubelet.env import (
    MAIN_PROCESS_ENV,
    MAIN_PROCESS_SESSION_LEADER,
    TERMINATION_LOG_ENV,
    ContainerError,
    base_env,
    command_line,
    container_env,
)
from airflow_elastic.localcluster.kubelet.nodes import HOST_IP
from airflow_elastic.localcluster.kubelet.probes import readiness_loop
from airflow_elastic.localcluster.kubelet.procs import Running, exit_code, spawn
from airflow_elastic.localcluster.kubelet.status import ContainerRecord, build_status, go_duration, termination_message
from airflow_elastic.localcluster.kubelet.volumes import MountError, mount, prepare_volumes
from airflow_elastic.localcluster.network import ADDRESS_SUFFIXES, Network
from airflow_elastic.localcluster.podnet import PodNetwork, Sandbox
from airflow_elastic.localcluster.resources import PODS
from airflow_elastic.localcluster.store import Obj, Store, now
from airflow_elastic.localcluster.storeport import with_store_port

COMPONENT = "kubelet"


class Host(Protocol):
    """What a pod worker uses of its kubelet (:class:`~airflow_elastic.localcluster.kubelet.Kubelet`)."""

    store: Store
    recorder: Recorder
    config: ClusterConfig
    state_dir: Path
    network: Network
    backoff_base: float
    backoff_max: float
    api_address: Callable[[], str] | None
    pod_network: PodNetwork | None

    def spawn_task(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]: ...

    def grace_of(self, pod: Obj | None) -> float: ...


class PodWorker:
    """Drives the containers of one pod (identified by uid) and publishes its status."""

    def __init__(self, kubelet: Host, pod: Obj):
        self.k = kubelet
        meta, spec = pod["metadata"], pod["spec"]
        self.key: tuple[str, str] = (meta["namespace"], meta["name"])
        self.uid: str = meta["uid"]
        self.node: str = spec["nodeName"]
        self.dir = pod_dir(kubelet.state_dir, meta["namespace"], meta["name"], self.uid)
        self.specs = {c["name"]: c for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])}
        waiting = "PodInitializing" if spec.get("initContainers") else "ContainerCreating"
        self.records = [
            ContainerRecord(c["name"], c.get("image", ""), init=True, state={"waiting": {"reason": "PodInitializing"}})
            for c in spec.get("initContainers") or []
        ] + [
            ContainerRecord(c["name"], c.get("image", ""), state={"waiting": {"reason": waiting}})
            for c in spec.get("containers") or []
        ]
        self.policy: str = spec.get("restartPolicy", "Always")
        self.hostname: str = spec.get("hostname") or meta["name"]
        self.pod_ip = HOST_IP if spec.get("hostNetwork") else kubelet.network.pod_ip(pod)
        #: The pod's network namespace (None: the host's network, in mode ``loopback`` or with ``hostNetwork``).
        self.netns: Sandbox | None = None
        #: What the pod's IP was derived from (released when the pod is gone).
        self.identity = {
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "spec": {"hostname": spec.get("hostname"), "subdomain": spec.get("subdomain")},
        }
        self.start_time = now()
        self.sandbox = False
        self.silent = False  # no more status writes (cluster shutdown)
        self.terminating = False
        self.stop = asyncio.Event()
        self.wake = asyncio.Event()
        self.finished = asyncio.Event()
        self.running: dict[str, Running] = {}
        self.volumes: dict[str, Path] = {}
        self._crashes: dict[str, int] = {}
        #: Ports of a Ray container moved on the host's network (:mod:`..rayports`), by container.
        self.ray_ports: dict[str, rayports.RayPorts] = {}
        #: Container name -> the private temp dir of its current run (Ray images; see :meth:`_private_tmp`).
        self.private_tmp: dict[str, str] = {}
        self._kill_timer: asyncio.TimerHandle | None = None
        self._deadline_timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------------------------------ helpers

    def pod(self) -> Obj | None:
        pod = self.k.store.find(PODS, *self.key)
        return pod if pod is not None and pod["metadata"]["uid"] == self.uid else None

    def event(self, kind: str, reason: str, message: str) -> None:
        pod = self.pod()
        if pod is not None and not self.silent:  # a silenced worker's node is gone or stopping: it reports nothing
            self.k.recorder.record(pod, kind, reason, message, COMPONENT, self.node)

    def publish(self, terminal: str | None = None, reason: str | None = None, message: str | None = None) -> None:
        """Write the pod's status if it changed. While terminating only the final status is written, so the
        terminal phase appears together with its reason."""
        pod = self.pod()
        if pod is None or self.silent or (self.terminating and terminal is None):
            return
        status = build_status(
            pod,
            self.records,
            sandbox_ready=self.sandbox,
            pod_ip=self.pod_ip,
            host_ip=HOST_IP,
            start_time=self.start_time,
            terminal=terminal,
            reason=reason,
            message=message,
        )
        if status != pod.get("status"):
            body = {"metadata": {"name": self.key[1], "namespace": self.key[0]}, "status": status}
            with contextlib.suppress(errors.NotFound):
                self.k.store.update(PODS, body, subresource="status")

    async def _sleep(self, seconds: float) -> bool:
        """Sleep unless the pod is stopped first; True if still alive."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)
        return not self.terminating

    async def _wait_wake(self) -> bool:
        """Wait for a ConfigMap/Secret change in the namespace (or the end); True if still alive."""
        self.wake.clear()
        waits = [asyncio.ensure_future(self.wake.wait()), asyncio.ensure_future(self.stop.wait())]
        _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for fut in pending:
            fut.cancel()
        return not self.terminating

    # ------------------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"pod:{self.key[0]}/{self.key[1]}")

    async def _run(self) -> None:
        try:
            if not await self._setup():
                return
            if not await self._run_init():
                self.publish()
                return
            main = [r for r in self.records if not r.init]
            for record in main:
                record.state = {"waiting": {"reason": "ContainerCreating"}}
            await asyncio.gather(*(self._container_loop(r) for r in main))
            self.publish()
        finally:  # no container runs any more: the sandbox goes (a kubelet stops a finished pod's sandbox)
            if self.netns is not None and self.k.pod_network is not None:
                self.k.pod_network.detach(self.pod_ip, self.netns)
                self.netns = None

    async def _sandbox(self, pod: Obj) -> bool:
        """The pod's own network namespace with its IP, when the cluster gives pods one; retried as the kubelet
        retries ``RunPodSandbox``. False if the pod was stopped first."""
        if self.k.pod_network is None or (pod.get("spec") or {}).get("hostNetwork"):
            return True
        while True:
            try:
                self.netns = await asyncio.to_thread(self.k.pod_network.attach, self.pod_ip, self.key[0])
                return True
            except OSError as err:
                self.event("Warning", "FailedCreatePodSandBox", f"Failed to create pod sandbox: {err}")
                if not await self._sleep(2.0):
                    return False

    async def _setup(self) -> bool:
        pod = self.pod()
        if pod is None:
            return False
        for sub in ("containers", "logs", "volumes", "termination", "pids"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        if not await self._sandbox(pod):
            return False
        self.sandbox = True
        self.publish()
        deadline = pod["spec"].get("activeDeadlineSeconds")
        if deadline:
            self._deadline_timer = asyncio.get_running_loop().call_later(float(deadline), self._deadline_exceeded)
        while True:
            pod = self.pod()
            if pod is None:
                return False
            try:
                self.volumes, warnings = prepare_volumes(self.k.store, pod, self.dir, self.k.state_dir)
                break
            except MountError as err:
                self.event("Warning", "FailedMount", str(err))
                if not await self._wait_wake():
                    return False
        for warning in warnings:
            self.event("Warning", "UnsupportedVolume", warning)
        return not self.terminating

    def _deadline_exceeded(self) -> None:
        self.k.spawn_task(
            self.terminate(
                self.k.grace_of(self.pod()),
                reason="DeadlineExceeded",
                message="Pod was active on the node longer than the specified deadline",
            )
        )

    async def _run_init(self) -> bool:
        for record in [r for r in self.records if r.init]:
            while True:
                code = await self._run_once(record)
                if self.terminating:
                    return False
                if code == 0:
                    break
                if code is not None and (self.policy == "Never" or not await self._backoff(record)):
                    return False
            self.publish()
        return True

    async def _container_loop(self, record: ContainerRecord) -> None:
        while True:
            code = await self._run_once(record)
            if self.terminating:
                return
            if code is None:
                continue
            if self.policy == "Never" or (self.policy == "OnFailure" and code == 0):
                return
            if not await self._backoff(record):
                return

    async def _backoff(self, record: ContainerRecord) -> bool:
        """Crash-loop back-off: the first restart is immediate, then base, 2 x base, ... up to the cap."""
        crashes = self._crashes.get(record.name, 0)
        self._crashes[record.name] = crashes + 1
        if crashes == 0:
            return True
        delay = min(self.k.backoff_base * 2 ** (crashes - 1), self.k.backoff_max)
        ns, name = self.key
        terminated = record.terminated()
        if terminated:
            record.last_state = {"terminated": terminated}
        message = f"back-off {go_duration(delay)} restarting failed container={record.name} pod={name}_{ns}({self.uid})"
        record.state = {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
        self.publish()
        self.event(
            "Warning", "BackOff", f"Back-off restarting failed container {record.name} in pod {name}_{ns}({self.uid})"
        )
        return await self._sleep(delay)

    async def _cannot_create(self, record: ContainerRecord, err: ContainerError) -> None:
        """Report a container that cannot be created and wait until that may change."""
        if err.reason == "ErrImagePull":
            record.state = {"waiting": {"reason": "ErrImagePull", "message": err.message}}
            self.publish()
            self.event("Warning", "Failed", f'Failed to pull image "{record.image}": {err.message}')
            self.event("Warning", "Failed", "Error: ErrImagePull")
            back_off = f'Back-off pulling image "{record.image}"'
            record.state = {"waiting": {"reason": "ImagePullBackOff", "message": f"{back_off}: {err.message}"}}
            self.publish()
            self.event("Normal", "BackOff", back_off)
            self.event("Warning", "Failed", "Error: ImagePullBackOff")
            await self.stop.wait()  # the image map is fixed for the cluster's life
            return
        record.state = {"waiting": {"reason": err.reason, "message": err.message}}
        self.publish()
        self.event("Warning", "Failed", f"Error: {err.message}")
        await self._wait_wake()

    def _prepare(self, record: ContainerRecord, pod: Obj) -> tuple[list[str], dict[str, str], Path, Path]:
        spec = self.specs[record.name]
        declared = container_env(pod, spec, self.k.store)
        if self.netns is None:
            # torch's store binds all interfaces of the one host: its rendezvous port is moved per rendezvous.
            declared = with_store_port(declared, cluster=str(self.k.state_dir), namespace=pod["metadata"]["namespace"])
        argv = command_line(spec, self.k.config, declared)
        try:
            image_env = images.ray_environment(spec.get("image", "")) or {}
        except images.ImageUnavailable as err:
            raise ContainerError("CreateContainerConfigError", str(err)) from err
        if image_env:
            image_env = {**image_env, "RAY_TMPDIR": self._private_tmp(record.name)}
        if self.netns is None and rayports.is_ray_pod(pod):
            # Ray binds some fixed ports on every address of the one host: moved per cluster or pod.
            argv, declared, self.ray_ports[record.name] = rayports.rewrite(
                pod, argv, declared, pod_ip=self.pod_ip, cluster=str(self.k.state_dir)
            )
        rewrite = self.k.network.rewriter(pod)
        argv = [rewrite(a) for a in argv]
        declared = {k: rewrite(v, address=k.endswith(ADDRESS_SUFFIXES)) for k, v in declared.items()}
        cwd = self.dir / "containers" / record.name
        cwd.mkdir(parents=True, exist_ok=True)
        mounts = mount(spec, self.volumes, cwd)
        term_file = self.dir / "termination" / record.name
        term_file.write_bytes(b"")
        rel = Path((spec.get("terminationMessagePath") or "/dev/termination-log").lstrip("/"))
        if rel.parts and ".." not in rel.parts:
            link = cwd / rel
            link.parent.mkdir(parents=True, exist_ok=True)
            link.unlink(missing_ok=True)
            link.symlink_to(term_file)
        env = {
            **base_env(self.hostname, str(cwd)),
            **self._in_cluster(pod, spec, cwd),
            **image_env,
            **declared,
            **mounts,
            TERMINATION_LOG_ENV: str(term_file),
            MAIN_PROCESS_ENV: MAIN_PROCESS_SESSION_LEADER,
        }
        return argv, env, cwd, term_file

    def _private_tmp(self, container: str) -> str:
        """A fresh temp dir for this run of a Ray container (``RAY_TMPDIR``), its previous run's removed. In a real
        ``rayproject/ray`` container ``/tmp/ray`` is the container's own; here every pod shares the host's, and Ray
        keeps there, in ``ray_current_cluster``, the address a job's driver connects to (the job supervisor's
        ``canonicalize_bootstrap_address_or_die("auto", ...)``): a driver then joined whichever cluster on the host
        started last. Short and under ``/tmp``: Ray's sockets live in it, and a socket path has at most 107 bytes."""
        self.remove_private_tmp(container)
        self.private_tmp[container] = tempfile.mkdtemp(prefix="lc-ray-")
        return self.private_tmp[container]

    def remove_private_tmp(self, container: str | None = None) -> None:
        """Remove ``container``'s private temp dir (every container's with ``None``)."""
        for name in [container] if container is not None else list(self.private_tmp):
            if (path := self.private_tmp.pop(name, None)) is not None:
                shutil.rmtree(path, ignore_errors=True)

    def _in_cluster(self, pod: Obj, spec: Obj, cwd: Path) -> dict[str, str]:
        """``KUBERNETES_SERVICE_*`` and the service-account mount (see :mod:`.serviceaccount`)."""
        if self.k.api_address is None:
            return {}
        env = serviceaccount.service_env(self.k.api_address())
        if serviceaccount.automount(pod):
            directory = serviceaccount.prepare(pod, self.dir, self.k.state_dir)
            env |= serviceaccount.expose(spec, directory, cwd)
        return env

    async def _run_once(self, record: ContainerRecord) -> int | None:
        """Create and run the container once; its exit code, or None if it could not be created."""
        pod = self.pod()
        if pod is None or self.terminating:
            return None
        try:
            argv, env, cwd, term_file = self._prepare(record, pod)
        except ContainerError as err:
            await self._cannot_create(record, err)
            return None
        previous = record.terminated()
        if previous:
            record.last_state = {"terminated": previous}
        if previous or record.last_state:
            record.restart_count += 1
        ns, name = self.key
        log = log_path(self.k.state_dir, ns, name, self.uid, record.name)
        self.event("Normal", "Pulled", f'Container image "{record.image}" already present on machine')
        self.event("Normal", "Created", f"Created container: {record.name}")
        started_at = now()
        try:
            enter = self.netns.enter(cwd) if self.netns is not None else None
            running = await spawn(argv, cwd, env, log, self.dir / "pids" / f"{record.name}.json", enter)
        except OSError as err:
            message = f'failed to start container "{record.name}": exec: "{argv[0]}": {err.strerror}'
            record.state = {
                "terminated": {"exitCode": 128, "reason": "StartError", "message": message, "finishedAt": now()}
            }
            self.publish()
            self.event("Warning", "Failed", f"Error: {message}")
            return 128
        self.running[record.name] = running
        if self.terminating:  # stopped while it was being started
            running.signal_main(signal.SIGTERM)
        record.container_id = f"local://{running.proc.pid}"
        record.state = {"running": {"startedAt": started_at}}
        record.started = True
        probe = self.specs[record.name].get("readinessProbe")
        record.ready = probe is None
        self.event("Normal", "Started", f"Started container {record.name}")
        self.publish()
        prober = None
        if probe and record.name in self.ray_ports:
            probe = rayports.moved_probe(probe, self.ray_ports[record.name])
        if probe:
            prober = asyncio.create_task(
                readiness_loop(
                    probe,
                    self.specs[record.name],
                    self.pod_ip,
                    cwd,
                    env,
                    lambda ok: self._set_ready(record, ok),
                    self.netns.enter(cwd) if self.netns is not None else (),
                )
            )
        returncode = await running.proc.wait()
        if prober is not None:
            prober.cancel()
        await running.finish()
        self.running.pop(record.name, None)
        code, sig = exit_code(returncode)
        terminated: Obj = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": started_at,
            "finishedAt": now(),
            "containerID": record.container_id,
        }
        if sig:
            terminated["signal"] = sig
        policy = self.specs[record.name].get("terminationMessagePolicy", "File")
        if message := termination_message(term_file, log, policy, code):
            terminated["message"] = message
        record.state = {"terminated": terminated}
        record.ready = record.started = False
        self.publish()
        return code

    def _set_ready(self, record: ContainerRecord, ready: bool) -> None:
        if record.ready != ready and "running" in record.state:
            record.ready = ready
            self.publish()

    # ------------------------------------------------------------------------------------------ termination

    def _kill_all(self) -> None:
        for running in list(self.running.values()):
            running.signal(signal.SIGKILL)

    def shorten_grace(self, grace: float) -> None:
        """A later delete with a shorter grace period brings the SIGKILL forward."""
        if self._kill_timer is not None:
            loop = asyncio.get_running_loop()
            when = loop.time() + max(grace, 0)
            if when < self._kill_timer.when():
                self._kill_timer.cancel()
                self._kill_timer = loop.call_at(when, self._kill_all)

    async def terminate(
        self,
        grace: float,
        *,
        reason: str | None = None,
        message: str | None = None,
        publish: bool = True,
    ) -> None:
        """Stop every container (SIGTERM to its main process, SIGKILL to all its processes after ``grace``), then
        write the final status: ``Failed`` with ``reason``/``message`` if given, else from the exit codes. A pod
        marked for deletion is then removed."""
        if self.terminating:
            self.shorten_grace(grace)
            await self.finished.wait()
            return
        self.terminating = True
        self.silent = self.silent or not publish
        self.stop.set()
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        # No grace at all means SIGKILL at once: a SIGTERM first could still be handled (exit 143) before it.
        for name, running in list(self.running.items()):
            self.event("Normal", "Killing", f"Stopping container {name}")
            if grace <= 0:
                running.signal(signal.SIGKILL)
            else:
                running.signal_main(signal.SIGTERM)
        self._kill_timer = asyncio.get_running_loop().call_later(max(grace, 0), self._kill_all)
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        self._kill_timer.cancel()
        for record in self.records:
            if not record.init and "terminated" not in record.state:
                record.state = {
                    "terminated": {
                        "exitCode": 137,
                        "reason": "ContainerStatusUnknown",
                        "message": "The container could not be located when the pod was terminated",
                        "finishedAt": now(),
                    }
                }
                record.ready = record.started = False
        succeeded = all(r.succeeded() for r in self.records if not r.init)
        self.publish("Failed" if reason or not succeeded else "Succeeded", reason, message)
        pod = self.pod()
        if pod is not None and pod["metadata"].get("deletionTimestamp") and not self.silent:
            with contextlib.suppress(errors.NotFound):
                self.k.store.delete(PODS, *self.key, grace_seconds=0)
        self.finished.set()
