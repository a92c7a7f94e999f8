"""``FailurePolicy.node_loss_toleration_seconds`` through ``TrainingGroupOperator`` on the local cluster.

A node vanishes without notice and stays (``vanish`` with ``delete_after=None``: no PodGC), and the cluster's default
toleration is DefaultTolerationSeconds' 300 s. A group that tolerates the unreachable taint for a few seconds has its
pods on that node evicted (``DisruptionTarget``/``DeletionByTaintManager``) about that long after the taint, and the
Trainer's Job recreates them for their indexes elsewhere, from the latest checkpoint: the group trains on and
succeeds, and each evicted pod, Terminating for good while its replacement runs, is counted as a preemption the
cluster absorbed (``node_loss`` in the attempt's ``absorbed_causes``). With ``None`` the pods stay bound to the lost
node (the cluster's 300 s), and nothing replaces them.

The TrainJob backend shows the restart: its runtime's Jobs have no podFailurePolicy, so a pod deleted from a lost node
counts as failed at once. A JobSet's Jobs (podFailurePolicy) wait for the pod to be terminal, as upstream's Job
controller does, which on a node that stays needs more than the eviction (docs/preemption.md §2.1).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred
from kubernetes import client, config

from airflow_elastic import Checkpointing, FailurePolicy, Placement, Role, TrainingGroup
from airflow_elastic.contract import checkpoints
from airflow_elastic.localcluster import LocalCluster, NodePool
from airflow_elastic.localcluster.config import SPOT_LABELS, SPOT_TAINTS
from airflow_elastic.operators import TrainingGroupOperator
from tests.support.operator_fakes import StateStore, TaskInstance
from tests.support.paths import ROOT

SCRIPT = ROOT / "tests" / "data" / "scripts" / "train_ckpt.py"
UNREACHABLE = "node.kubernetes.io/unreachable"
STEPS = 16
#: The group's toleration, and how long a test waits for the eviction (or sees none) after the taint: far below the
#: cluster's 300 s, far above the toleration on a loaded machine.
TOLERATION, BOUND = 3, 25.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Its own cluster: a vanished node stays lost. Three spot nodes, so a lost one leaves room elsewhere."""
    pools = [
        NodePool("ondemand", count=1, labels={"airflow-elastic.io/capacity-type": "on-demand"}),
        NodePool("spot", count=3, labels=dict(SPOT_LABELS), taints=SPOT_TAINTS),
    ]
    with LocalCluster(tmp_path_factory.mktemp("node-loss-toleration"), nodes=pools) as local:
        local.configure_node_lifecycle(default_toleration_seconds=300)  # DefaultTolerationSeconds', explicitly
        yield local


@pytest.fixture(scope="module")
def core(cluster: LocalCluster) -> Iterator[client.CoreV1Api]:
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    yield client.CoreV1Api(api)
    api.close()


@pytest.fixture
def connection(cluster: LocalCluster, core: client.CoreV1Api, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A ``kubernetes`` connection to the module's cluster, defaulting to a fresh namespace."""
    namespace = f"nl-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": namespace}})
    extra = {"kube_config_path": str(cluster.kubeconfig), "namespace": namespace}
    monkeypatch.setenv("AIRFLOW_CONN_NODE_LOSS", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    yield namespace
    core.delete_namespace(namespace)


def operator(ckpt: Path, seconds: int | None, *, deferrable: bool) -> TrainingGroupOperator:
    group = TrainingGroup(
        "nl",
        [Role("node", replicas=2, command=["python", str(SCRIPT)], placement=Placement(spot=True))],
        image="python:3.11-slim",
        checkpoint=Checkpointing(str(ckpt)),
        failure=FailurePolicy(max_failures=0, max_preemptions=4, node_loss_toleration_seconds=seconds),
        env={"PYTHONPATH": str(ROOT), "TRAIN_STEPS": str(STEPS), "STEP_SECONDS": "0.4"},
        coordinator_port=29500,
    )
    return TrainingGroupOperator(
        task_id="train",
        group=group,
        backend="trainjob",
        kubernetes_conn_id="node_loss",
        deferrable=deferrable,
        poll_interval=0.2,
        startup_timeout=60,
    )


def _stamp(value: Any) -> float:
    return (value if isinstance(value, datetime) else datetime.fromisoformat(str(value))).timestamp()


class NodeLoss:
    """Once the leader checkpointed step 2, vanish the node of the group's first running pod (never deleted) and
    record, from the objects, when the unreachable taint came and when each lost pod was evicted."""

    def __init__(self, cluster: LocalCluster, core: client.CoreV1Api, namespace: str, ckpt: Path):
        self.cluster, self.core, self.namespace, self.ckpt = cluster, core, namespace, ckpt
        self.node = ""
        self.lost: list[str] = []
        self.before: list[str] = []  # every pod of the group when the node vanished
        self.tainted_at: float | None = None
        self.evicted: dict[str, tuple[str, float]] = {}  # pod -> (reason, DisruptionTarget time)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._vanish()
            self._watch()
        except BaseException as err:  # reported by join()
            self.error = err

    def _vanish(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = checkpoints.latest_complete(None, str(self.ckpt))
            pods = self.core.list_namespaced_pod(self.namespace).items
            running = [p for p in pods if p.status and p.status.phase == "Running"]  # a new pod has no status yet
            if found is not None and found.step >= 2 and running:
                self.node = running[0].spec.node_name
                self.lost = [p.metadata.name for p in running if p.spec.node_name == self.node]
                self.before = sorted(p.metadata.name for p in self.core.list_namespaced_pod(self.namespace).items)
                self.cluster.preempt_node(self.node, "vanish", unreachable_after=0.5, delete_after=None)
                return
            time.sleep(0.1)
        raise AssertionError("the group never reached step 2")

    def _watch(self) -> None:
        deadline = time.monotonic() + 30
        while self.tainted_at is None and time.monotonic() < deadline:
            taints = self.core.read_node(self.node).spec.taints or []
            added = [t.time_added for t in taints if (t.key, t.effect) == (UNREACHABLE, "NoExecute")]
            self.tainted_at = _stamp(added[0]) if added else None
            time.sleep(0.1)
        assert self.tainted_at is not None, f"{self.node} never tainted unreachable"
        until = time.monotonic() + BOUND
        while time.monotonic() < until and len(self.evicted) < len(self.lost):
            for name in self.lost:
                pod = self.core.read_namespaced_pod(name, self.namespace)
                for cond in (pod.status and pod.status.conditions) or []:
                    if cond.type == "DisruptionTarget" and pod.metadata.deletion_timestamp:
                        self.evicted[name] = (cond.reason, _stamp(cond.last_transition_time))
            time.sleep(0.2)

    def join(self) -> None:
        self._thread.join(BOUND + 150)
        assert not self._thread.is_alive() and self.error is None, self.error


def test_a_short_toleration_evicts_the_lost_pods_and_the_group_trains_on(cluster, core, connection, tmp_path):
    ckpt = tmp_path / "ckpt"
    loss = NodeLoss(cluster, core, connection, ckpt)
    ctx = {"ti": TaskInstance(), "task_state_store": StateStore()}
    result = operator(ckpt, TOLERATION, deferrable=False).execute(ctx)
    loss.join()
    assert loss.lost and set(loss.evicted) == set(loss.lost), (loss.lost, loss.evicted)
    for reason, at in loss.evicted.values():
        # After the pod's own toleration (stamps are whole seconds), within the bound: not the cluster's 300 s.
        assert reason == "DeletionByTaintManager"
        assert TOLERATION - 1 <= at - loss.tainted_at <= BOUND, (at - loss.tainted_at, loss.evicted)
    # The Trainer's Job recreated the evicted pods for their indexes on other nodes; training went on to the end.
    assert (result["backend"], result["state"]) == ("trainjob", "Succeeded"), result
    assert result["metrics"]["step"] == STEPS and ctx["ti"].try_number == 1, result
    (attempt,) = result["attempts"]  # recovered in the cluster: no resubmission
    assert attempt["outcome"] == "succeeded" and result["metrics"]["resumed_from"] >= 2, result
    # Each evicted pod, still Terminating on the lost node (its kubelet is gone) while its replacement ran, is a
    # preemption the cluster absorbed (the taint manager's eviction: node loss), charged to max_preemptions.
    assert result["preemptions"] >= 1 and attempt["preemptions"] == result["preemptions"], result
    assert attempt["absorbed_causes"] == ["node_loss"] * len(loss.lost), (attempt, loss.lost)
    stuck = {p.metadata.name for p in core.list_namespaced_pod(connection).items if p.metadata.deletion_timestamp}
    assert stuck == set(loss.lost), (stuck, loss.lost)  # never terminal: counted while Terminating
    pods = core.list_namespaced_pod(connection).items
    assert {p.spec.node_name for p in pods if p.status.phase == "Succeeded"}.isdisjoint({loss.node}), loss.node


def test_without_a_toleration_the_lost_pods_stay_bound_for_the_clusters_default(cluster, core, connection, tmp_path):
    ckpt = tmp_path / "ckpt"
    loss = NodeLoss(cluster, core, connection, ckpt)
    ctx = {"ti": TaskInstance(), "task_state_store": StateStore()}
    with pytest.raises(TaskDeferred):  # the TrainJob is created; nobody waits on it here
        operator(ckpt, None, deferrable=True).execute(ctx)
    loss.join()  # watched for BOUND seconds after the taint
    assert loss.lost and loss.evicted == {}, loss.evicted
    pods = {p.metadata.name: p for p in core.list_namespaced_pod(connection).items}
    assert sorted(pods) == loss.before, "nothing replaced the lost pods"
    for name in loss.lost:
        assert pods[name].status.phase == "Running" and not pods[name].metadata.deletion_timestamp
        assert not any(t.key == UNREACHABLE for t in pods[name].spec.tolerations or []), "the cluster's default"
