"""Metrics out of a pod (stdlib only): final ones through its termination message, where the operator reads them
(:func:`report`); a sweep trial's intermediate values as marked lines on stdout (:func:`report_intermediate`).

Why stdout for intermediate values: the sweep reads them through the pod log API, which the RBAC in ``docker/``
already grants, so they need no metrics server, sidecar or database, and the termination message holds only the
final result. The line format lives in :mod:`airflow_elastic.contract.markers`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any

from airflow_elastic import contract
from airflow_elastic.contract.markers import format_line

#: The kubelet keeps at most 4096 bytes of a termination message.
MAX_BYTES = 4096
#: Where the local cluster's kubelet looks for the termination message of this container.
LOCAL_CLUSTER_LOG = "LOCALCLUSTER_TERMINATION_LOG"


class MetricsTooLarge(ValueError):
    """The metrics do not fit in a termination message."""


def termination_log_path(env: Mapping[str, str] | None = None) -> str:
    """``$LOCALCLUSTER_TERMINATION_LOG`` on the local cluster, else ``$AE_METRICS_PATH``, else
    ``/dev/termination-log``."""
    env = os.environ if env is None else env
    return env.get(LOCAL_CLUSTER_LOG) or env.get(contract.METRICS_PATH) or contract.TERMINATION_MESSAGE_PATH


def report(metrics: Mapping[str, Any], path: str | None = None) -> str:
    """Write ``metrics`` as this pod's final result (a later call replaces an earlier one).

    Args:
        metrics: a JSON-serialisable mapping, e.g. ``{"loss": 0.12, "step": 900}``.
        path: where to write; default :func:`termination_log_path`.

    Returns:
        The path written.

    Raises:
        MetricsTooLarge: the JSON is over 4096 bytes (the kubelet would truncate it); store large results
            under the checkpoint URI and report their location instead.
        TypeError: a value is not JSON-serialisable.
    """
    data = json.dumps(dict(metrics), separators=(",", ":"), sort_keys=True).encode()
    if len(data) > MAX_BYTES:
        raise MetricsTooLarge(
            f"metrics are {len(data)} bytes as JSON, over the {MAX_BYTES}-byte termination-message limit; "
            "report fewer values and put large artefacts in object storage"
        )
    target = path or termination_log_path()
    # In place, not write-and-rename: on a real node the file is a bind mount that cannot be replaced, and the
    # kubelet reads it only after the container exited.
    with open(target, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    return target


def _is_reporter(env: Mapping[str, str]) -> bool:
    """Rank 0 of the group (``AE_RANK``), and under torchrun its first process (``RANK``): the leader's first pod
    is the one whose log the sweep follows, and one line per step is enough."""
    return all(env.get(name, "0").strip() in ("", "0") for name in (contract.RANK, contract.TORCH_RANK))


def report_intermediate(step: int, metrics: Mapping[str, float], env: Mapping[str, str] | None = None) -> bool:
    """Report intermediate metrics at ``step`` to a running sweep (early stopping and the sweep's report read them).

    Prints one line ``AE_INTERMEDIATE {"step": 3, "metrics": {"val_loss": 0.41}}`` to stdout and flushes it,
    only in the process that reports for the group: global rank 0 (the leader's first pod, whose log the sweep
    reads; outside a group, the only process). Other ranks print nothing, so every rank may call it.

    Args:
        step: an integer >= 0 that grows over the run (epoch or iteration).
        metrics: name -> finite number; the sweep's objective among them, e.g. ``{"val_loss": 0.41}``.
        env: the environment to read the rank from (default ``os.environ``).

    Returns:
        True if this process printed the line.

    Raises:
        ValueError: a bad step, an empty mapping, or a value that is not a finite number.
    """
    line = format_line(step, metrics)
    if not _is_reporter(os.environ if env is None else env):
        return False
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    return True
