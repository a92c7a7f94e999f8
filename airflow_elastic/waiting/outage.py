"""How long a wait rides out a Kubernetes API outage (pure: no Airflow, no Kubernetes client).

Every wait — the triggers, the sync waiters, the sensor — looks at the cluster again and again, and a look fails
when the API does (each request already retried by the hook, :mod:`airflow_elastic.hooks.retry`). A managed control
plane is unavailable for minutes while it is upgraded, while the training runs on undisturbed; so a wait keeps
looking through *transient* failures (5xx, 429, no reply: :data:`airflow_elastic.hooks.errors.TRANSIENT_ERRORS`)
for ``api_outage_tolerance`` seconds, :data:`DEFAULT_API_OUTAGE_TOLERANCE` by default, counted from its first failed
look. Any other failure (403, 401, a missing resource type) ends the wait at once: waiting does not fix it.

An :class:`Outage` says so in two log lines per outage: when it starts (what failed, how long it is tolerated) and
when it ends (how long it lasted); and, when the tolerance runs out, the message the wait ends with.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Seconds of failed looks in a row a wait tolerates by default (managed control-plane upgrades take minutes).
DEFAULT_API_OUTAGE_TOLERANCE = 300.0


@dataclass
class Outage:
    """The failed looks in a row of one wait (or of several waits that look together, as a sweep's trials).

    Args:
        tolerance: seconds a transient outage is ridden out (``api_outage_tolerance``); ``0``: only ``min_failures``.
        min_failures: failed looks in a row before the tolerance can run out (one slow look is no outage).
    """

    tolerance: float = DEFAULT_API_OUTAGE_TOLERANCE
    min_failures: int = 1
    since: float | None = None  #: the first failed look of the current outage (epoch seconds)
    failures: int = 0

    def __post_init__(self) -> None:
        if self.tolerance < 0:
            raise ValueError(f"api_outage_tolerance must not be negative, got {self.tolerance}")

    def failed(self, now: float, error: object, *, transient: bool = True) -> tuple[str, str]:
        """Account for a failed look at time ``now``.

        Returns:
            ``(notice, fatal)``: the line to log when this look starts an outage (else ``""``), and the message to
            end the wait with when it must end (a non-transient error, or the tolerance ran out; else ``""``).
        """
        self.failures += 1
        if not transient:
            return "", str(error)
        notice = ""
        if self.since is None:
            self.since = now
            notice = (
                f"The Kubernetes API is failing ({error}); waiting for it to come back for up to "
                f"{self.tolerance:g} s (api_outage_tolerance)"
            )
        if self.failures >= self.min_failures and now - self.since >= self.tolerance:
            return notice, (
                f"{error} (the Kubernetes API has been failing for {_seconds(now - self.since)}, longer than "
                f"api_outage_tolerance={self.tolerance:g} s)"
            )
        return notice, ""

    def recovered(self, now: float) -> str:
        """Account for a look that worked; the line to log when it ends an outage (else ``""``)."""
        since, self.since, self.failures = self.since, None, 0
        if since is None:
            return ""
        return f"The Kubernetes API answers again; the outage lasted {_seconds(now - since)}"


def _seconds(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds >= 10 else f"{max(0.0, seconds):.1f} s"
