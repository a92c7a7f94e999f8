"""Final metrics out of a pod through its termination message, where the operator reads them (stdlib only)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from airflow_elastic import contract

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
