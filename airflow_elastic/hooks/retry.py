"""When a failed Kubernetes API request is tried again, and after how long — one policy for both hooks.

- Requests that are safe to repeat (reads, log reads, merge patches, deletes) are retried on 429 ``Throttled``
  (after the server's ``Retry-After``), on 5xx ``ServerError`` and on ``ApiUnreachable`` (no reply), with jittered
  exponential backoff, up to ``attempts`` tries in all.
- Creates are retried only on 429: the server sheds a throttled request before processing it (client-go retries
  those for every verb too). A create that got a 5xx or no reply may have happened; retrying it blindly could make
  a second object, so the error goes to the caller, who looks the object up by name (adoption).
- Other 4xx are never retried: the same request would fail the same way.
- 401 ``Unauthorized`` is retried once, for every request, right after rebuilding the client from the connection:
  exec-plugin tokens (EKS, GKE) and projected service-account tokens expire, and a 401 means the server rejected
  the request before doing anything.
- A request on an API object that is not answered within ``timeout`` seconds is ``ApiUnreachable``: neither client
  sets a timeout of its own, and a request sent on a kept-alive connection to a server that vanished (a control
  plane being replaced) would otherwise wait forever, and with it the wait that made it. A healthy API server ends
  such a request itself within 60 s. Streams (watches, followed logs) and raw paths (logs, service proxies) keep
  their own bounds.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from airflow_elastic.hooks.errors import ApiUnreachable, KubernetesApiError, ServerError, Throttled, Unauthorized


@dataclass(frozen=True)
class Step:
    """What to do before the next attempt: wait ``delay`` seconds, and rebuild the client first if ``refresh``."""

    delay: float
    refresh: bool = False


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded, jittered exponential backoff for Kubernetes API requests.

    Args:
        attempts: tries in all, the first included (``1`` disables retries).
        base_delay: the first backoff in seconds; it doubles per attempt.
        max_delay: the longest backoff in seconds.
        max_retry_after: the longest wait a server's ``Retry-After`` can ask for.
        timeout: the longest a request on an API object may go unanswered, in seconds (``None``: no limit).
    """

    attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 15.0
    max_retry_after: float = 60.0
    timeout: float | None = 75.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be at least 1, got {self.attempts}")
        if min(self.base_delay, self.max_delay, self.max_retry_after) < 0:
            raise ValueError("RetryPolicy delays must not be negative")
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError(f"RetryPolicy.timeout must be positive seconds or None, got {self.timeout}")

    def next_step(
        self,
        error: KubernetesApiError,
        *,
        attempt: int,
        repeatable: bool,
        refreshed: bool,
        rng: Callable[[], float] = random.random,
    ) -> Step | None:
        """Decide whether to try a failed request again.

        Args:
            error: what the failed attempt raised.
            attempt: the number of the attempt that failed (1 for the first).
            repeatable: whether repeating the request is harmless (reads, deletes, merge patches; not creates).
            refreshed: whether the client was already rebuilt after a 401 during this request.
            rng: a source of uniform numbers in [0, 1) for the jitter.

        Returns:
            The :class:`Step` to take before the next attempt, or ``None`` to raise ``error``.
        """
        if attempt >= self.attempts:
            return None
        if isinstance(error, Unauthorized):
            return None if refreshed else Step(0.0, refresh=True)
        if isinstance(error, Throttled):
            if error.retry_after is not None:
                # Spread the clients the server throttled together over a little extra time.
                return Step(min(error.retry_after, self.max_retry_after) + self.base_delay * rng())
            return Step(self.backoff(attempt, rng))
        if repeatable and isinstance(error, ServerError | ApiUnreachable):
            return Step(self.backoff(attempt, rng))
        return None

    def backoff(self, attempt: int, rng: Callable[[], float] = random.random) -> float:
        """The wait after failed attempt number ``attempt``: between half and all of ``base * 2**(attempt-1)``,
        capped at ``max_delay``."""
        ceiling = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return ceiling / 2 + ceiling / 2 * rng()


class WarningLog(Protocol):
    """Where retries are told: a ``logging.Logger`` or a task's or hook's structured logger."""

    def warning(self, msg: str, /, *args: object) -> object:
        """Log ``msg % args`` as a warning."""


class Attempts:
    """The attempts of one request: counts them, and after each failure says what to do next (or re-raises).

    Args:
        policy: the retry policy.
        repeatable: whether repeating the request is harmless.
        log: where to say that a request is retried.
    """

    def __init__(self, policy: RetryPolicy, *, repeatable: bool, log: WarningLog) -> None:
        self.policy = policy
        self.repeatable = repeatable
        self.log = log
        self.count = 0
        self.refreshed = False

    def after(self, error: KubernetesApiError) -> Step:
        """Account for a failed attempt.

        Returns:
            The step to take before trying again.

        Raises:
            KubernetesApiError: ``error`` itself, when the request is not to be tried again.
        """
        self.count += 1
        step = self.policy.next_step(error, attempt=self.count, repeatable=self.repeatable, refreshed=self.refreshed)
        if step is None:
            raise error
        if step.refresh:
            self.refreshed = True
            self.log.warning("%s; reloading the connection's credentials and trying once more", error)
        else:
            self.log.warning("%s; retry %d of %d in %.1fs", error, self.count, self.policy.attempts - 1, step.delay)
        return step
