"""The goodput of ``bench/goodput.py``, one definition for every strategy, and the figures of fault-tolerant replica
groups (strategy ``ft``), from the trainers' records, the watched pods and the reclaims.

**Goodput** = retained samples ÷ the samples the paid pod-time would have processed undisturbed, counted in
*pod-batches* (one pod's share of one step):

* retained: every step of the final model once (a step computed again after a restart counts once). A DDP step
  (strategies 1-3) retains one pod-batch per pod of the group (the global batch is split over them); a torchft step
  retains one batch per replica group that took part in it (``participants``, torchft's ``num_participants()``;
  here one pod per replica group), the participants of its last commit;
* paid pod-time: the training pods' running time from the start of the first step to the last step, restarts and
  replacements included from the moment their pods run (start-up, checkpoint load, rendezvous, healing), each pod
  until it ended or its node was reclaimed (:func:`goodput_pods.pod_seconds`);
* undisturbed: one pod-batch per pod per *step time*, the median time between consecutive steps of one process
  (with every replica group taking part, for ``ft``): checkpoint writes, stalls and restarts are what goodput loses.

So goodput = retained pod-batches x step time ÷ paid pod-seconds; 1 is a run that never stopped or wrote a
checkpoint. The pod-time a lost node no longer runs is not paid, nor is a pod waiting for a node.
"""

from __future__ import annotations

import itertools
import statistics
from typing import Any

from bench.scripts.goodput_pods import Pod

#: Seconds after a reclaim within which the process training at that moment stops if the reclaim interrupted it.
INTERRUPTED = 5.0
#: A survivor's step in the new quorum counts only if it comes within this many seconds of the reclaim.
PAUSE_WINDOW = 60.0


def retained(records: list[dict[str, Any]], steps: int, pods_per_step: int | None) -> int:
    """Retained pod-batches: per step up to ``steps``, ``pods_per_step`` (DDP) or the participants of its last
    commit (torchft records, ``pods_per_step`` None)."""
    last: dict[int, dict[str, Any]] = {}
    for record in sorted(records, key=lambda r: r["time"]):
        if record.get("start") or not record.get("committed", True) or record["step"] > steps:
            continue
        last[record["step"]] = record
    if pods_per_step is not None:
        return pods_per_step * len(last)
    return sum(int(r["participants"]) for r in last.values())


def ft_lost(records: list[dict[str, Any]]) -> int:
    """Replica-group steps computed and not kept: discarded attempts (not committed) and the commits of a step that
    was committed again later (after a restart from the durable checkpoint)."""
    by_step: dict[int, list[dict[str, Any]]] = {}
    for record in records:
        if record["committed"]:
            by_step.setdefault(record["step"], []).append(record)
    again = sum(len(mine) - int(max(mine, key=lambda r: r["time"])["participants"]) for mine in by_step.values())
    return sum(not r["committed"] for r in records) + max(again, 0)


def ft_step_time(records: list[dict[str, Any]], full: int) -> float | None:
    """Median time between consecutive committed steps of one process, both with every replica group."""
    by_process: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if record["committed"]:
            by_process.setdefault(record["process"], []).append(record)
    gaps = []
    for mine in by_process.values():
        mine.sort(key=lambda r: r["time"])
        gaps += [
            b["time"] - a["time"]
            for a, b in itertools.pairwise(mine)
            if b["step"] == a["step"] + 1 and a["participants"] == b["participants"] == full
        ]
    return round(statistics.median(gaps), 4) if gaps else None


def restart_overheads(
    records: list[dict[str, Any]], starts: list[dict[str, Any]], reclaims: list[float]
) -> list[tuple[float, float | None, float | None]]:
    """Per reclaim that interrupted training: reclaim → first step of a process that started after it, split at
    the start of the last process (any rank) that began in between: the wait until the whole group runs again
    (the cluster's node-loss handling, the restart, a replacement node, scheduling; an Airflow retry) and that
    process's start-up (``import torch``, model, checkpoint, rendezvous) to the first step; ``None`` parts
    without start records. A reclaim interrupted if the process training at that moment recorded its last step
    within :data:`INTERRUPTED` s after it (a reclaim of a node without pods does not stop it), or if training
    was already stopped."""
    done = [r for r in records if not r.get("start")]
    found: list[tuple[float, float | None, float | None]] = []
    for at in reclaims:
        before = [r for r in done if r["time"] <= at]
        if not before:
            continue
        old = before[-1]["process"]
        last = max(r["time"] for r in done if r["process"] == old)
        if last - at > INTERRUPTED:
            continue
        resumed = [r for r in done if r["time"] > max(at, last) and r["process"] != old]
        if resumed:
            first = resumed[0]["time"]
            began = max((r["began"] for r in starts if at < r["began"] < first), default=None)
            split = (began - at, first - began) if began is not None else (None, None)
            found.append((first - at, *split))
    return found


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def ft_figures(
    records: list[dict[str, Any]],
    starts: list[dict[str, Any]],
    pods: list[Pod],
    reclaims: list[dict[str, Any]],
    step_time: float,
    window: tuple[float, float],
) -> dict[str, Any]:
    """Survivor restarts, survivors' pause per reclaim, replacement heal time and whether it healed from a peer.

    * survivor restarts: replica-group pods whose node was not reclaimed that ended or restarted a container before
      the last step (pods that end after it are the run ending);
    * survivors' pause: per reclaim that took a replica group's pod, per surviving replica group, from the end of
      its last committed step in the old quorum (where its failed collective began) to the end of its first
      committed step in the smaller quorum, less one step time; median over all;
    * rejoin pause: the same survivors' extra time at the step where the replacement joined the quorum (the
      quorum's reconfiguration and the checkpoint sent to it); median;
    * heal time: per replica-group process that started after training began (a replacement), its process start
      to its first committed step; median, and how many took their state from a live peer (torchft's healing)
      rather than only from the durable checkpoint. A replacement whose first step came after the run's last (the
      group had finished: it trained alone, from nothing) is not counted.
    """
    first, last = window
    lost_nodes = {r["node"]: r["time"] for r in reclaims}
    survivors = [
        p
        for p in pods
        if p.training
        and p.running is not None
        and not (p.node in lost_nodes and lost_nodes[p.node] >= p.running)
        and ((p.ended is not None and p.ended < last) or p.restarts > 0)
    ]
    processes = _processes(records)
    pauses, rejoins = [], []
    for reclaim in reclaims:
        victims = {
            p.replica_group
            for p in pods
            if p.training
            and p.node == reclaim["node"]
            and p.running is not None
            and p.running <= reclaim["time"]
            and (p.ended is None or p.ended > reclaim["time"])
        }
        if not victims:
            continue
        for mine in processes.values():
            if mine[0]["replica_group"] in victims or not mine[0]["time"] <= reclaim["time"] <= mine[-1]["time"]:
                continue
            pause, rejoin = _pauses(mine, reclaim["time"], step_time)
            pauses += [pause] if pause is not None else []
            rejoins += [rejoin] if rejoin is not None else []
    heals, peers = [], 0
    for start in starts:
        mine = [r for r in processes.get(start["process"], []) if r["committed"]]
        if start["began"] <= first or not mine or mine[0]["time"] > last:
            continue  # not a replacement, or one that joined no quorum: the group had reached its last step
        heals.append(mine[0]["time"] - start["began"])
        peers += any(r.get("healed") for r in processes[start["process"]] if r["time"] <= mine[0]["time"])
    return {
        "survivor_restarts": len(survivors),
        "survivor_pause": _median(pauses),
        "survivor_pauses": len(pauses),
        "rejoin_pause": _median(rejoins),
        "heal_seconds": _median(heals),
        "replacements": len(heals),
        "healed_from_peer": peers,
    }


def _processes(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for record in sorted(records, key=lambda r: r["time"]):
        out.setdefault(record["process"], []).append(record)
    return out


def _pauses(mine: list[dict[str, Any]], at: float, step_time: float) -> tuple[float | None, float | None]:
    """A survivor's pause after a reclaim at ``at`` (see :func:`ft_figures`), and its pause when the quorum grew
    again after it."""
    committed = [r for r in mine if r["committed"]]
    if not any(r["time"] <= at for r in committed):
        return None, None
    pause = rejoin = None
    for previous, record in itertools.pairwise(committed):
        if record["time"] <= at or record["time"] > at + PAUSE_WINDOW:
            continue
        if pause is None and record["participants"] < previous["participants"]:
            pause = max(record["time"] - previous["time"] - step_time, 0.0)
        elif pause is not None and record["participants"] > previous["participants"]:
            rejoin = max(record["time"] - previous["time"] - step_time, 0.0)
            break
    return pause, rejoin
