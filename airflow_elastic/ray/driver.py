"""The Ray job's driver log, as the task follows it (pure).

In ``K8sJobMode`` KubeRay's submitter container runs ``ray job submit`` and then ``ray job logs --follow`` (the
command is built in ``ray-operator/controllers/ray/common/job.go``, ``BuildJobSubmitCommand``), so the submitter pod's
log *is* the driver's log. The submitter is a batch/v1 Job named after the RayJob (``rayjob_controller.go``
``createNewK8sJob``, backoff limit 2): its pods carry ``batch.kubernetes.io/job-name=<rayjob>``, and a retried
submission is a new pod, so the newest started one is followed (:class:`SubmitterLogFollow`, on the shared
:class:`~airflow_elastic.waiting.logfollow.LogFollow` cursors).

:class:`DriverOutput` keeps what the task needs of the lines shown: the last ones (for a failure's message) and the
last result the entrypoint reported with a ``AE_RESULT {...}`` line
(:data:`airflow_elastic.contract.markers.RESULT_MARKER`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_elastic.contract.markers import parse_result
from airflow_elastic.ray.status import submitter_pods
from airflow_elastic.waiting.logfollow import LogFollow, LogTarget

#: Lines of the driver's log a failure's message repeats.
TAIL_LINES = 20


class SubmitterLogFollow(LogFollow):
    """:class:`~airflow_elastic.waiting.logfollow.LogFollow` for a RayJob: the newest started submitter pod."""

    def __init__(self, rayjob: str) -> None:
        super().__init__("driver")
        self.rayjob = rayjob

    def target(self, pods: Iterable[Mapping[str, Any]]) -> LogTarget | None:
        """The newest submitter pod that started (``None`` until one did)."""
        started = [
            p
            for p in submitter_pods(pods, self.rayjob)
            if (p.get("status") or {}).get("phase") not in (None, "Pending")
        ]
        return LogTarget.of(started[0]) if started else None


class DriverOutput:
    """The last :data:`TAIL_LINES` lines of the driver's log shown, and the last result it reported."""

    def __init__(self, tail_lines: int = TAIL_LINES) -> None:
        self.tail: deque[str] = deque(maxlen=tail_lines)
        self.reported: dict[str, Any] | None = None

    def take(self, line: str) -> None:
        """One line as the task log showed it (``[pod] text``)."""
        self.tail.append(line)
        if (result := parse_result(line)) is not None:
            self.reported = result
