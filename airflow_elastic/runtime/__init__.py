"""What training code imports inside a pod: its place in the group, checkpoints, preemption, metrics.

Standard library only at import (training images install airflow-elastic with ``--no-deps``); fsspec is
imported lazily, and only for non-local checkpoint URIs. A complete loop::

    from airflow_elastic import runtime

    ctx = runtime.context()
    last = runtime.latest_checkpoint()
    start = last.step + 1 if last else 0
    with runtime.preemption_signal() as stop:
        for step in range(start, steps):
            train_one_step()
            if ctx.is_leader and (step % every == 0 or stop.requested):
                runtime.save_checkpoint(step, lambda d: save_state(d))
            if stop.requested:
                break
    runtime.report({"loss": loss, "step": step})

``runtime.save_checkpoint(step, write, background=True)`` writes while the next steps train (``write`` then writes a
copy of the state taken before the call); ``runtime.wait_for_checkpoint()`` waits for it.

Around a step, ``with runtime.peer_loss(save):`` turns a collective error from a lost peer into an emergency
checkpoint and a wait for the group restart (see :mod:`airflow_elastic.runtime.peers`).

``runtime.run_then_exit(train, teardown=...)`` ends the process once training is done without the framework's
teardown, which can hang (see :mod:`airflow_elastic.runtime.exiting`).

Under the Kubeflow backends (TrainJob, PyTorchJob) ``runtime.context()`` reads the pod's place from their
``PET_*`` variables; ``os.environ.update(runtime.torch_env())`` before ``init_process_group`` lets a trainer started
without torchrun join a TrainJob (see :mod:`airflow_elastic.runtime.launchers`).

In a fault-tolerant group (torchft replica groups), :mod:`airflow_elastic.runtime.fault_tolerance` saves the
quorum's durable checkpoint on one pod, with torchft's manager state, and resumes from it after a whole-group restart.

An elastic role's hosts (Ready pods, from the API server) come from ``runtime.ready_hosts()`` or
``python -m airflow_elastic.runtime.discovery`` (Horovod's ``--host-discovery-script``).
"""

from __future__ import annotations

from airflow_elastic.contract.checkpoints import Checkpoint
from airflow_elastic.runtime.checkpoint import checkpoint_at, latest_checkpoint, save_checkpoint, wait_for_checkpoint
from airflow_elastic.runtime.context import RESUME_FROM, TRIAL_PARAMS, Context, context
from airflow_elastic.runtime.discovery import DiscoveryError, Host, ready_hosts
from airflow_elastic.runtime.exiting import exit_now, run_then_exit
from airflow_elastic.runtime.launchers import torch_env
from airflow_elastic.runtime.peers import PEER_LOST_EXIT_CODE, is_peer_loss, peer_loss
from airflow_elastic.runtime.report import MAX_BYTES, MetricsTooLarge, report, report_intermediate, termination_log_path
from airflow_elastic.runtime.signals import PreemptionSignal, on_sigterm, preemption_signal

__all__ = [
    "MAX_BYTES",
    "PEER_LOST_EXIT_CODE",
    "RESUME_FROM",
    "TRIAL_PARAMS",
    "Checkpoint",
    "Context",
    "DiscoveryError",
    "Host",
    "MetricsTooLarge",
    "PreemptionSignal",
    "checkpoint_at",
    "context",
    "exit_now",
    "is_peer_loss",
    "latest_checkpoint",
    "on_sigterm",
    "peer_loss",
    "preemption_signal",
    "ready_hosts",
    "report",
    "report_intermediate",
    "run_then_exit",
    "save_checkpoint",
    "termination_log_path",
    "torch_env",
    "wait_for_checkpoint",
]
