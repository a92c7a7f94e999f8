"""The process kubelet: containers as local processes, status, env, volumes, probes, restarts, termination."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from airflow_elastic.localcluster.config import ClusterConfig
from airflow_elastic.localcluster.kubelet import NODE_RESTART_REASON, procs, reap_orphans
from airflow_elastic.localcluster.resources import CONFIGMAPS, PODS, SECRETS
from tests.support.kubelet_helpers import PY, NodeSide, group_alive, pod_body

pytestmark = pytest.mark.anyio

RECORD_SIGTERM = Path(__file__).parents[1] / "data" / "scripts" / "record_sigterm.py"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def side(tmp_path: Path):
    node_side = NodeSide(tmp_path)
    yield node_side
    await node_side.close()


def state(pod: dict, container: int = 0, key: str = "containerStatuses") -> dict:
    return pod["status"][key][container]["state"]


def conditions(pod: dict) -> dict[str, str]:
    return {c["type"]: c["status"] for c in pod["status"]["conditions"]}


def pgid_of(pod: dict, container: int = 0) -> int:
    return int(pod["status"]["containerStatuses"][container]["containerID"].removeprefix("local://"))


async def test_success_status_logs_and_events(side: NodeSide) -> None:
    script = textwrap.dedent(
        """
        import os
        print("hello from", os.environ["HOSTNAME"], flush=True)
        with open(os.environ["LOCALCLUSTER_TERMINATION_LOG"], "w") as f:
            f.write('{"loss": 0.25}')
        """
    )
    side.create(PODS, pod_body("ok", script))
    pod = await side.wait_phase("ok", "Succeeded")
    terminated = state(pod)["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    assert json.loads(terminated["message"]) == {"loss": 0.25}
    status = pod["status"]["containerStatuses"][0]
    assert status["containerID"].startswith("local://") and status["imageID"].startswith("python@sha256:")
    assert (status["ready"], status["started"], status["restartCount"]) == (False, False, 0)
    assert conditions(pod) == {
        "PodReadyToStartContainers": "False",
        "Initialized": "True",
        "Ready": "False",
        "ContainersReady": "False",
        "PodScheduled": "True",
    }
    assert pod["status"]["podIP"].startswith("127.") and not pod["status"]["podIP"].startswith("127.0.0.")
    assert pod["status"]["hostIP"] == "127.0.0.1" and pod["status"]["qosClass"] == "BestEffort"
    assert pod["status"]["startTime"]
    assert side.log(pod) == "hello from ok\n"
    reasons = [r for _, r, _ in side.events("ok")]
    assert reasons == ["Scheduled", "Pulled", "Created", "Started"]


async def test_failure_exit_code_and_fallback_to_logs(side: NodeSide) -> None:
    script = "import sys\nfor i in range(100): print('line', i)\nsys.exit(3)"
    side.create(PODS, pod_body("bad", script, container={"terminationMessagePolicy": "FallbackToLogsOnError"}))
    pod = await side.wait_phase("bad", "Failed")
    terminated = state(pod)["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")
    lines = terminated["message"].splitlines()
    assert len(lines) == 80 and lines[-1] == "line 99"
    # Without the fallback policy the message stays empty.
    side.create(PODS, pod_body("bad2", script))
    assert "message" not in state(await side.wait_phase("bad2", "Failed"))["terminated"]


async def test_start_error_and_unmapped_image(tmp_path: Path) -> None:
    side = NodeSide(tmp_path, ClusterConfig(image_map={"trainer:1": [PY, "-c"]}))
    try:
        side.create(PODS, pod_body("noexec", container={"command": ["/nonexistent/binary"]}))
        terminated = state(await side.wait_phase("noexec", "Failed"))["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (128, "StartError")

        side.create(PODS, pod_body("mapped", container={"image": "trainer:1", "args": ["print('mapped')"]}))
        assert side.log(await side.wait_phase("mapped", "Succeeded")) == "mapped\n"

        side.create(PODS, pod_body("unmapped", container={"image": "other:2"}))
        pod = await side.wait_pod(
            "unmapped", lambda p: "ImagePullBackOff" in str(p.get("status", {}).get("containerStatuses"))
        )
        assert "has no local mapping" in state(pod)["waiting"]["message"]
        assert pod["status"]["phase"] == "Pending"
        events = side.events("unmapped")
        assert ("Warning", "Failed", "Error: ErrImagePull") in events
        assert ("Normal", "BackOff", 'Back-off pulling image "other:2"') in events
    finally:
        await side.close()


async def test_environment(side: NodeSide) -> None:
    side.create(CONFIGMAPS, {"metadata": {"name": "cfg"}, "data": {"LR": "0.1", "EPOCHS": "3"}})
    secret = base64.b64encode(b"s3cret").decode()
    env = [
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "ROLE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['role']"}}},
        {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}},
        {"name": "LR", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "LR"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
        {"name": "DESC", "value": "$(POD) on $(NODE) lr=$(LR) $$(LR) $(MISSING)"},
    ]
    container = {"env": env, "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}]}
    container["resources"] = {"limits": {"cpu": "1500m", "memory": "1Gi"}}
    script = "import os, json; print(json.dumps(dict(os.environ)))"
    side.create(PODS, pod_body("env", script, container=container, metadata={"labels": {"role": "worker"}}))
    pod = await side.wait_pod("env", lambda p: "CreateContainerConfigError" in str(p.get("status")))
    assert state(pod)["waiting"]["message"] == 'secret "creds" not found'
    side.create(SECRETS, {"metadata": {"name": "creds"}, "data": {"token": secret}})  # the kubelet retries now
    pod = await side.wait_phase("env", "Succeeded")
    seen = json.loads(side.log(pod))
    assert {k: seen[k] for k in ("POD", "NS", "NODE", "ROLE", "CPU", "LR", "TOKEN", "CFG_EPOCHS")} == {
        "POD": "env",
        "NS": "default",
        "NODE": pod["spec"]["nodeName"],
        "ROLE": "worker",
        "CPU": "1500",
        "LR": "0.1",
        "TOKEN": "s3cret",
        "CFG_EPOCHS": "3",
    }
    assert seen["IP"] == pod["status"]["podIP"]
    assert seen["DESC"] == f"env on {pod['spec']['nodeName']} lr=0.1 $(LR) $(MISSING)"
    assert seen["HOME"] == str(Path(seen["LOCALCLUSTER_TERMINATION_LOG"]).parent.parent / "containers" / "main")
    assert seen["PATH"].split(":")[0] == str(Path(PY).parent)
    assert pod["status"]["qosClass"] == "Guaranteed"


async def test_each_ray_container_has_its_own_ray_temp_dir(side: NodeSide) -> None:
    # Ray keeps the address a job's driver joins in <temp dir>/ray/ray_current_cluster: shared by every pod of the
    # host, a driver joined whichever cluster started last (a real container's /tmp is its own).
    show = {"image": "rayproject/ray:2.60.0", "command": ["python", "-c", "import os; print(os.environ['RAY_TMPDIR'])"]}
    for name in ("ray-a", "ray-b"):
        side.create(PODS, pod_body(name, container=show))
    dirs = [side.log(await side.wait_phase(name, "Succeeded")).strip() for name in ("ray-a", "ray-b")]
    assert dirs[0] != dirs[1] and all(Path(d).is_dir() and len(d) < 40 for d in dirs), dirs  # Ray's sockets: short
    side.store.delete(PODS, "default", "ray-a")
    await side.wait_gone("ray-a")
    await side.wait(lambda: not Path(dirs[0]).exists())  # removed with the pod
    assert Path(dirs[1]).is_dir()


async def test_volumes_shared_by_containers_and_claims(side: NodeSide) -> None:
    write = "import os; open('work/data.txt', 'w').write(os.environ['LOCALCLUSTER_MOUNT_WORK'])"
    read = "print(open('in/data.txt').read()); open('claim/from-pod', 'w').write('kept')"
    body = pod_body("vols", read)
    body["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "scratch", "mountPath": "/in"},
        {"name": "ckpt", "mountPath": "/claim"},
    ]
    body["spec"]["initContainers"] = [
        {
            "name": "init",
            "image": "python:3.11",
            "command": [PY, "-c", write],
            "volumeMounts": [{"name": "scratch", "mountPath": "/work"}],
        }
    ]
    body["spec"]["volumes"] = [
        {"name": "scratch", "emptyDir": {}},
        {"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}},
    ]
    side.create(PODS, body)
    pod = await side.wait_phase("vols", "Succeeded")
    assert state(pod, key="initContainerStatuses")["terminated"]["reason"] == "Completed"
    assert side.log(pod).strip().endswith("volumes/scratch")

    reader = pod_body("reader", "print(open('/'.join(['claim', 'from-pod'])).read())")
    reader["spec"]["containers"][0]["volumeMounts"] = [{"name": "c", "mountPath": "/claim"}]
    reader["spec"]["volumes"] = [{"name": "c", "persistentVolumeClaim": {"claimName": "ckpt"}}]
    side.create(PODS, reader)
    assert side.log(await side.wait_phase("reader", "Succeeded")) == "kept\n"
    assert (side.state_dir / "volumes" / "default" / "ckpt" / "from-pod").read_text() == "kept"


async def test_readiness_probe(side: NodeSide) -> None:
    script = "import time, pathlib; time.sleep(0.3); pathlib.Path('ready').touch(); time.sleep(60)"
    probe = {"exec": {"command": [PY, "-c", "import os, sys; sys.exit(not os.path.exists('ready'))"]}}
    probe |= {"periodSeconds": 1, "failureThreshold": 1}
    side.create(PODS, pod_body("probe", script, container={"readinessProbe": probe}))
    running = await side.wait_pod("probe", lambda p: p.get("status", {}).get("phase") == "Running")
    assert conditions(running)["Ready"] == "False"
    ready = await side.wait_pod("probe", lambda p: conditions(p)["Ready"] == "True")
    assert ready["status"]["containerStatuses"][0]["ready"] is True
    assert conditions(ready)["ContainersReady"] == "True"


async def test_restart_on_failure_with_backoff(side: NodeSide) -> None:
    script = textwrap.dedent(
        """
        import pathlib, sys
        runs = pathlib.Path("runs")
        n = int(runs.read_text()) + 1 if runs.exists() else 1
        runs.write_text(str(n))
        sys.exit(0 if n == 3 else 1)
        """
    )
    side.create(PODS, pod_body("flaky", script, restartPolicy="OnFailure"))
    pod = await side.wait_phase("flaky", "Succeeded")
    status = pod["status"]["containerStatuses"][0]
    assert status["restartCount"] == 2
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert status["state"]["terminated"]["exitCode"] == 0
    assert (
        "Warning",
        "BackOff",
        f"Back-off restarting failed container main in pod flaky_default({pod['metadata']['uid']})",
    ) in side.events("flaky")


async def test_graceful_deletion_sigterm_then_sigkill(side: NodeSide, tmp_path: Path) -> None:
    marker = tmp_path / "got-sigterm"
    polite = textwrap.dedent(
        f"""
        import pathlib, signal, sys, time
        def bye(*_):
            pathlib.Path({str(marker)!r}).write_text("TERM")
            sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        print("up", flush=True)
        time.sleep(60)
        """
    )
    stubborn = (
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(60)"
    )
    side.create(PODS, pod_body("polite", polite))
    side.create(PODS, pod_body("stubborn", stubborn, terminationGracePeriodSeconds=1))
    for name in ("polite", "stubborn"):
        await side.wait_pod(name, lambda p: "running" in str(p.get("status", {}).get("containerStatuses")))
        await side.wait(lambda n=name: side.log(side.pod(n)) == "up\n")
    side.store.delete(PODS, "default", "polite")
    side.store.delete(PODS, "default", "stubborn")
    await side.wait_gone("polite")
    await side.wait_gone("stubborn")
    assert marker.read_text() == "TERM"
    polite_final, stubborn_final = side.deleted["polite"], side.deleted["stubborn"]
    assert state(polite_final)["terminated"]["exitCode"] == 0 and polite_final["status"]["phase"] == "Succeeded"
    assert (state(stubborn_final)["terminated"]["exitCode"], stubborn_final["status"]["phase"]) == (137, "Failed")
    assert ("Normal", "Killing", "Stopping container main") in side.events("stubborn")


async def test_sigterm_reaches_the_main_process_only(side: NodeSide, tmp_path: Path) -> None:
    """As under a container runtime: ``sh -c "python ..."`` keeps the shell as the main process, so python never
    sees SIGTERM (it dies with the container); ``exec`` makes python the main process, and it does."""
    for name, prefix in (("wrapped", ""), ("execd", "exec ")):
        command = f"{prefix}{PY} {RECORD_SIGTERM} {tmp_path / name}"
        side.create(PODS, pod_body(name, container={"command": ["sh", "-c", command]}, terminationGracePeriodSeconds=2))
    for name in ("wrapped", "execd"):
        await side.wait(lambda n=name: (tmp_path / n / "pid").exists())
    groups = [pgid_of(side.pod(n)) for n in ("wrapped", "execd")]
    for name in ("wrapped", "execd"):
        side.store.delete(PODS, "default", name)
    for name in ("wrapped", "execd"):
        await side.wait_gone(name)
    assert not (tmp_path / "wrapped" / "sigterm").exists()
    assert (tmp_path / "execd" / "sigterm").exists()
    assert not any(group_alive(g) for g in groups)


async def test_runtime_warns_a_trainer_that_sigterm_cannot_reach(side: NodeSide, tmp_path: Path) -> None:
    script = tmp_path / "trainer.py"
    script.write_text("from airflow_elastic import runtime\nwith runtime.preemption_signal():\n    print('done')\n")
    for name, prefix in (("wrapped", ""), ("execd", "exec ")):
        side.create(PODS, pod_body(name, container={"command": ["sh", "-c", f"{prefix}{PY} {script}"]}))
    logs = {}
    for name in ("wrapped", "execd"):
        logs[name] = side.log(await side.wait_phase(name, "Succeeded"))
    assert "is not its container's main process" in logs["wrapped"]
    assert logs["execd"] == "done\n"


async def test_no_process_outlives_deletion_or_shutdown(side: NodeSide) -> None:
    side.create(PODS, pod_body("tree", container={"command": ["sh", "-c", "sleep 999 & wait"]}))
    side.create(PODS, pod_body("tree2", container={"command": ["sh", "-c", "sleep 999 & wait"]}))
    pods = [
        await side.wait_pod(n, lambda p: "running" in str(p.get("status", {}).get("containerStatuses")))
        for n in ("tree", "tree2")
    ]
    groups = [pgid_of(p) for p in pods]
    assert all(group_alive(g) for g in groups)
    side.store.delete(PODS, "default", "tree")
    await side.wait_gone("tree")
    assert state(side.deleted["tree"])["terminated"]["exitCode"] == 143
    assert not group_alive(groups[0])
    await side.kubelet.shutdown()
    assert not group_alive(groups[1])
    assert not list(side.state_dir.glob("pods/*/pids/*.json"))


#: A main process whose child leaves its process group (``setsid``, as torchrun starts each worker), records the
#: child's pid and waits for it; SIGTERM is ignored, so only a SIGKILL ends it.
ESCAPING_CHILD = """
import os, pathlib, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(999)"], start_new_session=True)
pathlib.Path(sys.argv[1]).write_text(str(child.pid))
child.wait()
"""


def _alive(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return raw[raw.rindex(")") + 2] != "Z"


@pytest.mark.parametrize("how", ["node_lost", "grace_ended"])
async def test_a_child_that_left_the_process_group_dies_with_its_container(
    side: NodeSide, tmp_path: Path, how: str
) -> None:
    """A container's SIGKILL takes every process of it, as a PID namespace ends: also a descendant in a session of
    its own (torchrun's workers), which would otherwise outlive a vanished node and keep its ports."""
    pid_file = tmp_path / "child.pid"
    container = {"command": [PY, "-c", ESCAPING_CHILD, str(pid_file)]}
    side.create(PODS, pod_body("tree", container=container, terminationGracePeriodSeconds=1))
    pod = await side.wait(lambda: pid_file.exists() and pid_file.read_text() and side.pod("tree"))
    child = int(pid_file.read_text())
    assert _alive(child) and group_alive(child)  # in a process group of its own, not the container's
    if how == "node_lost":
        side.kubelet.lose_node(pod["spec"]["nodeName"])
    else:
        side.store.delete(PODS, "default", "tree")  # SIGTERM ignored: SIGKILL once the grace ends
    await side.wait(lambda: not _alive(child) and not group_alive(pgid_of(pod)), timeout=10)


async def test_orphans_reaped_and_pods_failed_after_crash(tmp_path: Path) -> None:
    first = NodeSide(tmp_path, persistent=True)
    first.create(PODS, pod_body("survivor", container={"command": ["sh", "-c", "sleep 999 & wait"]}))
    pod = await first.wait_pod("survivor", lambda p: "running" in str(p.get("status", {}).get("containerStatuses")))
    pgid = pgid_of(pod)
    # A crash: the server's tasks vanish without any cleanup; the processes keep running.
    for worker in first.kubelet.workers.values():
        worker.task.cancel()
    await first.manager.stop()
    first.store.close()
    assert group_alive(pgid)

    assert reap_orphans(tmp_path) == [pgid]
    assert not group_alive(pgid)
    second = NodeSide(tmp_path, persistent=True)
    try:
        failed = await second.wait_phase("survivor", "Failed")
        assert failed["status"]["reason"] == NODE_RESTART_REASON
        terminated = state(failed)["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (255, "Unknown")
        assert conditions(failed)["Ready"] == "False"
    finally:
        await second.close()


def test_a_container_runs_only_once_its_pid_is_recorded(tmp_path: Path) -> None:
    """The start gate: without the kubelet's ``go`` (it crashed between the fork and the pid file: the pipe closes
    unwritten) the program never runs; with it, the program is the process the kubelet recorded."""
    for said, runs in ((b"", False), (b"go\n", True)):
        marker = tmp_path / f"ran-{runs}"
        read, write = os.pipe()
        gated = subprocess.Popen([*procs.GATE, "sh", "-c", f'echo $$ > "{marker}"'], stdin=read)
        os.close(read)
        os.write(write, said)
        os.close(write)
        assert gated.wait(timeout=10) == (0 if runs else 1)
        assert marker.exists() == runs
        assert not runs or marker.read_text().strip() == str(gated.pid)  # exec kept the pid


async def test_terminate_pod_and_active_deadline(side: NodeSide) -> None:
    """The internal API fault injection builds on: a condition first, SIGTERM, then a terminal reason."""
    side.create(PODS, pod_body("spot", "import time; print('up', flush=True); time.sleep(60)"))
    side.create(PODS, pod_body("slow", "import time; time.sleep(60)", activeDeadlineSeconds=1))
    await side.wait_pod("spot", lambda p: "running" in str(p.get("status", {}).get("containerStatuses")))
    disruption = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "TerminationByKubelet",
        "message": "Pod was terminated in response to imminent node shutdown.",
    }
    await side.kubelet.terminate_pod(
        "default",
        "spot",
        1,
        reason="Terminated",
        message="Pod was terminated in response to imminent node shutdown.",
        condition=disruption,
    )
    pod = side.pod("spot")  # not deleted: only stopped
    assert (pod["status"]["phase"], pod["status"]["reason"]) == ("Failed", "Terminated")
    assert state(pod)["terminated"]["exitCode"] == 143
    assert conditions(pod)["DisruptionTarget"] == "True"

    slow = await side.wait_phase("slow", "Failed")
    assert slow["status"]["reason"] == "DeadlineExceeded"


async def test_no_descendant_in_a_session_of_its_own_outlives_its_container(side: NodeSide, tmp_path: Path) -> None:
    """torchrun starts its workers with ``setsid``: out of the container's process group, still in its PID
    namespace. They die with the container, whether it is stopped (SIGTERM to the main process, which may exit and
    orphan them first) or its node is lost (SIGKILL)."""
    for name in ("stopped", "lost"):
        command = f"setsid sleep 999 & echo $! > {tmp_path / name}; wait"
        side.create(PODS, pod_body(name, container={"command": ["sh", "-c", command]}, terminationGracePeriodSeconds=5))
    for name in ("stopped", "lost"):
        await side.wait(lambda n=name: (tmp_path / n).exists() and (tmp_path / n).read_text().strip())
    workers = {name: int((tmp_path / name).read_text()) for name in ("stopped", "lost")}
    assert all(Path(f"/proc/{pid}").exists() for pid in workers.values())

    side.store.delete(PODS, "default", "stopped")
    await side.wait_gone("stopped")
    side.kubelet.lose_node(side.pod("lost")["spec"]["nodeName"])
    for pid in workers.values():
        await side.wait(lambda p=pid: not Path(f"/proc/{p}").exists() or " Z " in Path(f"/proc/{p}/stat").read_text())
