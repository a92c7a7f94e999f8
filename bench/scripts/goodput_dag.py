"""The DAGs of ``bench/goodput.py``: one per strategy, built from a settings dict the bench writes into a DAG file.

* ``elastic`` (strategies 1 and 2): ``TrainingGroupOperator`` as documented, deferrable; strategy 2 switches the
  trainer's emergency checkpoints and ``runtime.peer_loss`` off (``EMERGENCY_CHECKPOINT=0``, ``PEER_GUARD=0``). Without
  the helper a surviving peer's collective error often fails its pod before the reclaimed one is marked, and the
  cluster counts that as a genuine failure, so strategy 2 gets ``max_failures`` as large as its preemption budget
  (with the example's ``max_failures=1`` it would end the task at the second such reclaim instead of measuring).
* ``handrolled`` (strategy 3): what a team writes without this provider. The cncf provider has no JobSet operator,
  and its ``KubernetesJobOperator`` runs one pod template, so it cannot put the leader on on-demand and the workers on
  spot; the team applies the same JobSet with the cncf ``KubernetesHook``, polls its conditions, and raises when it
  failed, so Airflow ``retries`` start it again. The JobSet has a plain counted failure policy (``maxRestarts: 0``,
  no rules, no ``podFailurePolicy``, no tolerations for lost nodes), so every disruption fails it and burns a retry
  plus a scheduler round trip (Airflow's default ``retry_delay`` of 300 s, compressed like every other wait). Each
  try names its JobSet after the try number; the trainer resumes from the latest complete checkpoint in the shared
  checkpoint directory, as a sensible team's trainer does.
* ``ft`` (strategy 4): fault-tolerant replica groups as a user writes them: ``TrainingGroup(...,
  fault_tolerance=FaultTolerance(...))`` through ``TrainingGroupOperator``, one replica group of one pod on spot per
  worker of the other strategies (so the same spot pool and, with the lighthouse on on-demand where their leader
  runs, the same pod count), the torchft example's trainer (``dags/scripts/train_torchft.py``, wrapped by
  ``goodput_train_ft.py``) under torchrun as the example runs it, with the same steps, step time and checkpoints.
  The lighthouse drops a silent replica group after ``ft_heartbeat_ms``; a survivor's collective gives up after
  ``COLLECTIVE_TIMEOUT`` (``ft_collective_timeout``).
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any

from airflow_elastic import Checkpointing, FailurePolicy, FaultTolerance, Placement, Resources, Role, TrainingGroup

IMAGE = "ghcr.io/airflow-elastic/torch-trainer:0.1.0"  # the example's image, mapped to the bench trainer
FT_TRAINER = Path(__file__).resolve().parent / "goodput_train_ft.py"
JOBSETS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")


def group(settings: dict[str, Any]) -> TrainingGroup:
    """The PyTorch DDP example's group: leader on on-demand (it writes the checkpoints), workers on spot."""
    resources = Resources(cpu="500m", memory="1Gi", gpu=1)
    emergency = "1" if settings["emergency"] else "0"
    return TrainingGroup(
        name=settings["name"],
        image=IMAGE,
        roles=[
            Role("leader", resources=resources),
            Role("worker", replicas=settings["workers"], resources=resources, placement=Placement(spot=True)),
        ],
        failure=FailurePolicy(max_failures=settings["max_failures"], max_preemptions=settings["max_preemptions"]),
        checkpoint=Checkpointing(uri=settings["checkpoint_uri"], keep=3),
        env={
            "TRAIN_STEPS": str(settings["steps"]),
            "STEP_SECONDS": str(settings["step_seconds"]),
            "CHECKPOINT_EVERY": str(settings["every"]),
            "CHECKPOINT_SECONDS": str(settings["checkpoint_seconds"]),
            "EMERGENCY_CHECKPOINT": emergency,
            "PEER_GUARD": emergency,
            "PEER_TIMEOUT": "30",
            "PYTHONUNBUFFERED": "1",
        },
        coordinator_port=29400,
    )


def ft_group(settings: dict[str, Any]) -> TrainingGroup:
    """The same training as replica groups: one pod on spot per worker, the lighthouse on on-demand."""
    # The torchft example's command (dags/example_torch_fault_tolerant.py), with the bench's trainer.
    torchrun = (
        "torchrun",
        "--nnodes=$(AE_WORLD_SIZE)",
        "--node-rank=$(AE_RANK)",
        "--nproc-per-node=1",
        "--master-addr=$(MASTER_ADDR)",
        "--master-port=$(MASTER_PORT)",
        str(FT_TRAINER),
    )
    resources = Resources(cpu="500m", memory="1Gi", gpu=1)
    return TrainingGroup(
        name=settings["name"],
        image=IMAGE,
        roles=[Role("trainer", resources=resources, placement=Placement(spot=True), command=torchrun)],
        failure=FailurePolicy(max_failures=settings["max_failures"], max_preemptions=settings["max_preemptions"]),
        checkpoint=Checkpointing(uri=settings["checkpoint_uri"], keep=3),
        env={
            "TRAIN_STEPS": str(settings["steps"]),
            "STEP_SECONDS": str(settings["step_seconds"]),
            "CHECKPOINT_EVERY": str(settings["every"]),
            "CHECKPOINT_SECONDS": str(settings["checkpoint_seconds"]),
            "COLLECTIVE_TIMEOUT": str(settings["ft_collective_timeout"]),
            "PYTHONUNBUFFERED": "1",
        },
        coordinator_port=29400,
        fault_tolerance=FaultTolerance(
            settings["workers"],
            heartbeat_timeout_ms=settings["ft_heartbeat_ms"],
            join_timeout_ms=settings["ft_join_ms"],
        ),
    )


def plain_jobset(settings: dict[str, Any]) -> dict[str, Any]:
    """The same JobSet as a team writes it: a counted failure policy with no rules, Jobs without podFailurePolicy."""
    from airflow_elastic.training.render import render_jobset
    from airflow_elastic.training.render.pod import NODE_LOSS_TAINTS

    manifest = render_jobset(group(settings), namespace=settings["namespace"])
    manifest["spec"]["failurePolicy"] = {"maxRestarts": 0}
    for rjob in manifest["spec"]["replicatedJobs"]:
        job = rjob["template"]["spec"]
        job.pop("podFailurePolicy", None)
        job["backoffLimit"] = 0
        pod = job["template"]["spec"]  # nor the lost-node tolerations the provider declares
        kept = [t for t in pod.pop("tolerations", []) if t.get("key") not in NODE_LOSS_TAINTS]
        if kept:
            pod["tolerations"] = kept
    return manifest


def run_handrolled(manifest: dict[str, Any], conn_id: str, poll: float) -> dict[str, Any]:
    """Apply this try's JobSet, poll until it completed (return) or failed (raise: Airflow retries)."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    hook = KubernetesHook(conn_id=conn_id)
    group_, version, plural = JOBSETS
    hook.create_custom_object(group=group_, version=version, plural=plural, body=manifest, namespace=namespace)
    while True:
        jobset = hook.get_custom_object(group=group_, version=version, plural=plural, name=name, namespace=namespace)
        conditions = {c["type"]: c for c in (jobset.get("status") or {}).get("conditions") or []}
        if conditions.get("Completed", {}).get("status") == "True":
            return {"name": name}
        if conditions.get("Failed", {}).get("status") == "True":
            raise RuntimeError(f"JobSet {namespace}/{name} failed: {conditions['Failed'].get('message')}")
        time.sleep(poll)


def build(settings: dict[str, Any]) -> Any:
    """The DAG of ``settings["strategy"]`` (``elastic``, ``handrolled`` or ``ft``)."""
    from airflow.sdk import DAG, task

    with DAG(settings["dag_id"], schedule=None, catchup=False) as dag:
        if settings["strategy"] == "handrolled":

            @task(retries=settings["retries"], retry_delay=datetime.timedelta(seconds=settings["retry_delay"]))
            def train(ti=None) -> dict[str, Any]:
                # Each try is a JobSet of its own name, rendered whole: its pods' addresses (MASTER_ADDR, the
                # subdomain) name it. Renaming one rendered JobSet left them naming a JobSet that never ran, which
                # only pods sharing the host's network reached by accident.
                named = {**settings, "name": f"{settings['name']}-try{ti.try_number}"}
                return run_handrolled(plain_jobset(named), settings["conn_id"], settings["poll"])

            train()
        else:
            from airflow_elastic.operators import TrainingGroupOperator

            TrainingGroupOperator(
                task_id="train",
                group=ft_group(settings) if settings["strategy"] == "ft" else group(settings),
                namespace=settings["namespace"],
                kubernetes_conn_id=settings["conn_id"],
                poll_interval=settings["poll"],
                startup_timeout=180,
            )
    return dag
