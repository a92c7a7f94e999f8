"""``make demo``'s spot reclaim of the final training, and what it proves: the survivors were untouched.

The final training runs as torchft replica groups of one pod each. Once every replica group is in the quorum and a
durable checkpoint exists, :class:`Reclaim` reclaims the node of one replica group's pod, GKE-style. Then it
watches, through the Kubernetes API, until the training's pods end:

* the other replica groups' pods (:class:`Survivors`): each must keep its uid (never replaced) and a
  ``restartCount`` of 0 (never restarted);
* the reclaimed replica group's replacement pod, whose log must show torchft healing it from a live peer
  (:data:`HEALED`: the manager's ``healing is required step=…, max_step=…, recover_src_replica_rank=…``).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from airflow_elastic.contract import checkpoints

#: The final training's replica-group pods (the lighthouse has role ``lighthouse``).
SELECTOR = "airflow-elastic.io/dag-id={dag},airflow-elastic.io/task-id=train,airflow-elastic.io/role=trainer"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
#: The reclaim comes once the final training's latest complete checkpoint is at least this step (epoch).
RECLAIM_AT_STEP = 1
#: torchft's manager, in a replica group that joins a quorum whose step is ahead of its own: it fetches the weights
#: from the live peer ``recover_src_replica_rank`` instead of reading storage.
HEALED = re.compile(r"healing is required\b.*recover_src_replica_rank=\d+")
#: The trainer's line when its quorum changes (``train_digits_ft.py``).
QUORUM = re.compile(r"quorum of (\d+) replica group")
RUNNING, TERMINAL = "Running", ("Succeeded", "Failed")


@dataclass(frozen=True)
class PodView:
    """What the demo needs of a replica-group pod."""

    name: str
    uid: str
    index: int  # the replica group (JobSet's job index)
    phase: str
    restarts: int
    node: str = ""
    deleting: bool = False

    @classmethod
    def of(cls, pod: Any) -> PodView:
        """From a ``kubernetes`` client ``V1Pod``."""
        statuses = pod.status.container_statuses or []
        return cls(
            name=pod.metadata.name,
            uid=pod.metadata.uid,
            index=int((pod.metadata.labels or {}).get(JOB_INDEX, "-1")),
            phase=pod.status.phase or "",
            restarts=sum(int(s.restart_count or 0) for s in statuses),
            node=pod.spec.node_name or "",
            deleting=pod.metadata.deletion_timestamp is not None,
        )


class Survivors:
    """The replica groups a reclaim must not touch: their pods as first seen, and every later sighting."""

    def __init__(self, pods: Iterable[PodView]) -> None:
        self.first = {pod.index: pod for pod in pods}
        self.problems: dict[int, str] = {}
        self.ended: set[int] = set()

    def observe(self, pods: Iterable[PodView]) -> None:
        """One listing of the training's pods: a survivor's slot with another pod, or a restart, is a problem."""
        seen: set[int] = set()
        for pod in pods:
            first = self.first.get(pod.index)
            if first is None:
                continue
            seen.add(pod.index)
            if pod.uid != first.uid:
                self.problems.setdefault(
                    pod.index, f"replica group {pod.index}'s pod {first.name} was replaced by {pod.name}"
                )
            elif pod.restarts:
                self.problems[pod.index] = f"replica group {pod.index}'s pod {pod.name} restarted {pod.restarts}x"
            elif pod.phase in TERMINAL:
                self.ended.add(pod.index)
        self.ended |= set(self.first) - seen  # gone: the group finished and its pods were removed

    @property
    def done(self) -> bool:
        """Every survivor ended (or was replaced): nothing more to watch."""
        return set(self.first) <= self.ended | set(self.problems)

    def lines(self) -> list[str]:
        """What the demo prints about them."""
        if self.problems:
            return [f"survivor touched: {problem}" for _, problem in sorted(self.problems.items())]
        return [
            f"survivor untouched: replica group {pod.index}'s pod {pod.name} kept its uid {pod.uid} and restartCount 0 "
            f"through the reclaim"
            for _, pod in sorted(self.first.items())
        ]


def healed_line(log: str) -> str | None:
    """torchft's healing line in a pod's log, from ``healing is required`` on; ``None`` if it has not healed."""
    found = HEALED.search(log)
    return found.group(0) if found else None


def last_quorum(log: str) -> int:
    """The quorum size the trainer last logged (0 before any)."""
    sizes = QUORUM.findall(log)
    return int(sizes[-1]) if sizes else 0


class Reclaim(threading.Thread):
    """Reclaims one replica group's node once the training is in full quorum with a checkpoint, then watches.

    After the run: ``injected`` (node, pod, replica group, checkpoint step), ``survivors`` (:class:`Survivors`),
    ``healed`` (the replacement's name and its healing line), ``replacement`` (its name and the seconds from the
    reclaim to its first sighting running) and ``ended_after`` (seconds from the reclaim to the survivors' end), each
    ``None`` until it happened.
    """

    def __init__(self, cluster: Any, dag_id: str, emit: Callable[[str], None]) -> None:
        super().__init__(daemon=True)
        self.cluster, self.emit = cluster, emit
        self.selector = SELECTOR.format(dag=dag_id)
        self.stop = threading.Event()
        self.injected: dict[str, Any] | None = None
        self.survivors: Survivors | None = None
        self.healed: tuple[str, str] | None = None
        self.replacement: tuple[str, float] | None = None
        self.ended_after: float | None = None

    def run(self) -> None:
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=str(self.cluster.kubeconfig))
        self.core = client.CoreV1Api(api)
        try:
            victim = self._inject()
            if victim is not None:
                self._watch(victim)
        finally:
            api.close()

    def _pods(self) -> list[tuple[Any, PodView]] | None:
        try:
            pods = self.core.list_namespaced_pod("default", label_selector=self.selector).items
        except Exception:  # the API server is busy or going away: look again
            return None
        return [(pod, PodView.of(pod)) for pod in pods]

    def _log(self, name: str) -> str:
        try:
            return str(self.core.read_namespaced_pod_log(name, "default"))
        except Exception:  # not started yet, or gone
            return ""

    def _inject(self) -> PodView | None:
        """Wait for every replica group training in one quorum after a checkpoint; reclaim the last one's node."""
        while not self.stop.wait(0.3):
            pods = self._pods() or []
            running = {view.index: (pod, view) for pod, view in pods if view.phase == RUNNING and not view.deleting}
            groups = _replica_groups(pod for pod, _ in running.values())
            if not groups or len(running) < groups:
                continue
            step = _checkpoint_step(pod for pod, _ in running.values())
            victim = running[max(running)][1]
            if step is None or step < RECLAIM_AT_STEP or last_quorum(self._log(victim.name)) < groups:
                continue
            self.survivors = Survivors(view for index, (_, view) in running.items() if index != victim.index)
            on_node = self.cluster.preempt_node(
                victim.node, style="gke", grace_seconds=1, delete_after=1, replace_after=0.5
            )["pods"]
            self.injected = {"node": victim.node, "pod": victim.name, "replica_group": victim.index, "step": step}
            others = ", ".join(f"replica group {v.index} (pod {v.name})" for v in self.survivors.first.values())
            self.emit(
                f"[train] injected: spot reclaim of node {victim.node} (pods on it: {', '.join(on_node)}) after "
                f"checkpoint step {step}: replica group {victim.index} (pod {victim.name}) lost; {others} trains on"
            )
            return victim
        return None

    def _watch(self, victim: PodView) -> None:
        assert self.survivors is not None
        injected_at = time.monotonic()
        while not self.stop.wait(0.5):
            pods = self._pods()
            if pods is None:
                continue
            views = [view for _, view in pods]
            self.survivors.observe(views)
            if self.healed is None:
                for view in views:
                    if view.index == victim.index and view.uid != victim.uid and view.phase == RUNNING:
                        if self.replacement is None:
                            self.replacement = (view.name, time.monotonic() - injected_at)
                        line = healed_line(self._log(view.name))
                        if line:
                            self.healed = (view.name, line)
                            self.emit(f"[train] replica group {view.index}'s replacement {view.name} healed: {line}")
            if self.survivors.done:
                self.ended_after = time.monotonic() - injected_at
                return

    def missed_heal(self) -> str:
        """Why no heal was seen: when the replacement ran, against when the survivors ended."""
        ended = f"{self.ended_after:.0f} s" if self.ended_after is not None else "(not seen)"
        if self.replacement is None:
            return f"no replacement pod ran before the survivors ended, {ended} after the reclaim"
        name, after = self.replacement
        return f"its pod {name} ran {after:.0f} s after the reclaim; the survivors ended {ended} after it"


def _replica_groups(pods: Iterable[Any]) -> int:
    for pod in pods:
        env = {e.name: e.value for e in pod.spec.containers[0].env or [] if e.value is not None}
        if env.get("NUM_REPLICA_GROUPS"):
            return int(env["NUM_REPLICA_GROUPS"])
    return 0


def _checkpoint_step(pods: Iterable[Any]) -> int | None:
    for pod in pods:
        env = {e.name: e.value for e in pod.spec.containers[0].env or [] if e.value is not None}
        uri = env.get("AE_CHECKPOINT_URI")
        if uri:
            latest = checkpoints.latest_complete(None, uri)
            return latest.step if latest is not None else None
    return None
