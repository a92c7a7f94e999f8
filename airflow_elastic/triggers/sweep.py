"""``SweepTrigger``: one wait in the triggerer for every running trial of a hyperparameter sweep.

The shared :class:`~airflow_elastic.triggers.observer.JobSetObserver` of the namespace (one JobSet list and watch)
serves all the sweep's trials: one trigger, not one per trial, subscribed once per trial name so that a trial's
watched change is delivered at once. Each trial is judged by its own
:class:`~airflow_elastic.waiting.watch.Watch` (the decision every wait makes), through a :class:`TrainingGroupTrigger`
that is composed, never run: its ``_settle`` fetches what the watch asks for out of the shared caches, its log
follower copies the trial leader's log to the task log prefixed with the trial (``[trial 3] [pod] line``).

Intermediate values reach the sweep through that log: every line is also given to
:func:`airflow_elastic.contract.markers.parse` (the ``AE_INTERMEDIATE {...}`` lines ``runtime.report_intermediate``
prints), like Katib's stdout metrics collector, so they need nothing beyond the pod-log RBAC; the task log shows such
a line as progress (``[trial 3] [pod] step 4: val_loss=0.4123``), never the marker.

It fires once when a trial reaches a verdict, when the early-stopping rule (:func:`~airflow_elastic.sweeps.
stopping.decide`, on the serialized history plus the intermediates gathered here) says to stop a trial, or when
the sweep's budget deadline passes. The event (primitives only) carries every verdict, every stop and every
intermediate value gathered, and each trial's log lines it showed (``output``, bounded: the triggerer's log file of
this wait is overwritten by the next one, the worker's part of the task log, where the operator writes them, is
not); its repr is one line. It never raises (``status="error"`` instead).

**Round trips.** Each event resumes the worker, which records it, starts trials in the freed slots and defers again.
Once no further trial may start (``gather_successes``), a trial that succeeds frees nothing worth a round trip: its
verdict is held until every running trial has one, so the sweep's tail costs one round trip, not one per trial (any
other verdict, an early stop or the budget still fires at once: the worker acts on those).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any

from airflow_elastic.hooks.errors import TRANSIENT_ERRORS
from airflow_elastic.hooks.protocol import AsyncTrainingGroupHookProtocol
from airflow_elastic.preemption.evidence import describe
from airflow_elastic.triggers.hooked import HookedTrigger
from airflow_elastic.triggers.observer import MANAGED_SELECTOR, JobSetObserver, Snapshot, Subscription
from airflow_elastic.triggers.training_group import TrainingGroupTrigger
from airflow_elastic.waiting.logcursor import LogCursor
from airflow_elastic.waiting.trigger_output import OUTPUT_KEY, Summarized, summary
from airflow_elastic.waiting.watch import Observation

MARKER = "AE_INTERMEDIATE"


class TrialLog:
    """The task log as a trial's composed trigger sees it: every line prefixed with the trial, and each line that
    carries an intermediate-value marker handed to ``on_line`` (the sweep hands the pod's lines to
    ``on_line`` through the log follower instead, which shows a marker as progress)."""

    def __init__(self, log: Any, number: int, on_line: Callable[[int, str], None] | None = None) -> None:
        self._log, self._prefix, self._on_line = log, f"[trial {number}] ", on_line
        self._number = number

    def _write(self, level: str, message: str, *args: Any) -> None:
        text = message % args if args else message
        if self._on_line is not None and MARKER in text:
            self._on_line(self._number, text[text.index(MARKER) :])
        getattr(self._log, level)("%s%s", self._prefix, text)

    def info(self, message: str, *args: Any, **_: Any) -> None:
        """Log ``message % args`` at info level, prefixed with the trial."""
        self._write("info", message, *args)

    def warning(self, message: str, *args: Any, **_: Any) -> None:
        """Log ``message % args`` at warning level, prefixed with the trial."""
        self._write("warning", message, *args)

    def error(self, message: str, *args: Any, **_: Any) -> None:
        """Log ``message % args`` at error level, prefixed with the trial."""
        self._write("error", message, *args)

    def debug(self, message: str, *args: Any, **_: Any) -> None:
        """Log ``message % args`` at debug level, prefixed with the trial."""
        self._write("debug", message, *args)

    def exception(self, message: str, *args: Any, **_: Any) -> None:
        """Log ``message % args`` with the traceback, prefixed with the trial."""
        self._write("exception", message, *args)


async def first_snapshot(subscriptions: list[Subscription], timeout: float | None) -> Snapshot | None:
    """The newest snapshot the first of ``subscriptions`` to be delivered one brings (``None``: ``timeout`` passed)."""
    waits = [asyncio.ensure_future(s.next(timeout)) for s in subscriptions]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
    delivered = [w.result() for w in waits if not w.cancelled() and w.exception() is None]
    found = [snapshot for snapshot in delivered if snapshot is not None]
    return max(found, key=lambda snapshot: snapshot.started, default=None)


class SweepTrigger(HookedTrigger[AsyncTrainingGroupHookProtocol, dict[str, Any]]):
    """Fire once when any running trial of a sweep ends, should be stopped early, or the sweep's budget runs out.

    Args:
        trials: one dict per running trial: ``number``, ``name`` (its JobSet), ``watch`` (its
            :class:`~airflow_elastic.waiting.settings.WaitSettings` as
            :meth:`~airflow_elastic.waiting.settings.WaitSettings.to_dict` wrote it, computed by the operator:
            ``uid``, ``deadline``, ``startup_deadline``, ``metrics_role``, ``max_preemptions``,
            ``api_outage_tolerance``, ...; the first trial's ``api_outage_tolerance`` holds for all), and ``logs``,
            how far an earlier wait showed its leader's log (the event's ``logs``), so a re-deferral repeats no line.
        namespace: the trials' namespace.
        kubernetes_conn_id: the Airflow ``kubernetes`` connection.
        history: the sweep's history (``SweepHistory.to_json()``), what the stopping rule compares against.
        objective: the metric whose intermediate values count.
        mode: ``"min"`` or ``"max"``.
        early_stopping: ``None``, or a rule of :data:`airflow_elastic.sweeps.stopping.RULES`.
        stopping_options: the rule's keyword options.
        deadline: epoch seconds the sweep's budget (``max_wall_clock``, ``max_gpu_hours``) runs out (``None``).
        poll_interval: seconds between observations (shared with the other triggers of the namespace).
        log_role: the role whose first pod's log is followed (the leader); ``None``: no log, no intermediates.
        on_kill_action: ``"delete"`` every trial's JobSet when the task is killed, or ``"keep"`` them.
        connection_extras: the connection's extras resolved on the worker.
        gather_successes: no further trial may start: hold each success until every trial has a verdict.
        not_before: epoch seconds before which no event is yielded (:mod:`~airflow_elastic.triggers.hooked`).
    """

    hook_class = "airflow_elastic.hooks.async_group.AsyncTrainingGroupHook"

    def __init__(
        self,
        trials: list[dict[str, Any]],
        namespace: str,
        kubernetes_conn_id: str = "kubernetes_default",
        *,
        history: dict[str, Any] | None = None,
        objective: str = "",
        mode: str = "min",
        early_stopping: str | None = None,
        stopping_options: dict[str, Any] | None = None,
        deadline: float | None = None,
        poll_interval: float = 10.0,
        log_role: str | None = None,
        on_kill_action: str = "delete",
        connection_extras: dict[str, Any] | None = None,
        gather_successes: bool = False,
        not_before: float | None = None,
    ) -> None:
        super().__init__()
        self.trials = [dict(t) for t in trials]
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.history = dict(history or {})
        self.objective = objective
        self.mode = mode
        self.early_stopping = early_stopping
        self.stopping_options = dict(stopping_options or {})
        self.deadline = deadline
        self.poll_interval = poll_interval
        self.log_role = log_role
        self.on_kill_action = on_kill_action
        self.connection_extras = connection_extras
        self.gather_successes = gather_successes
        self.not_before = not_before
        self.intermediates: dict[int, dict[int, float]] = {}
        self._decided: dict[int, int] = {}  # trial -> the last step the stopping rule judged
        self._views = {int(t["number"]): self._view(t) for t in self.trials}
        # The trials are judged on the same looks: one outage for all (logged once, ending them together).
        if self._views:
            shared = next(iter(self._views.values()))._watch.outage
            for view in self._views.values():
                view._watch.outage = shared

    def _view(self, trial: Mapping[str, Any]) -> TrainingGroupTrigger:
        """The trial's composed group trigger: its watch, its evidence fetching, its log follower (never run)."""
        view = TrainingGroupTrigger(
            trial["name"],
            self.namespace,
            self.kubernetes_conn_id,
            wait={**trial.get("watch", {}), "poll_interval": self.poll_interval},
            log_role=self.log_role,
            on_kill_action=self.on_kill_action,
            connection_extras=self.connection_extras,
        )
        number = int(trial["number"])
        # TrialLog is a logger's stand-in (the calls the view makes), prefixing the trial.
        view._log = TrialLog(self.log, number)  # type: ignore[assignment]
        view._logs.on_line = lambda line: self._line(number, line)
        for uid, (second, nanos, lines) in (trial.get("logs") or {}).items():  # shown by an earlier wait
            view._logs.logs.cursors[uid] = LogCursor(started=True, stamp=(second, int(nanos)), at_stamp=int(lines))
        return view

    # ----------------------------------------------------------------------------------------- intermediates

    def _line(self, number: int, text: str) -> None:
        from airflow_elastic.contract import markers

        parsed = markers.parse(text)
        if parsed is None:
            return
        step, metrics = parsed
        value = metrics.get(self.objective)
        if isinstance(value, int | float) and not isinstance(value, bool):
            self.intermediates.setdefault(number, {})[int(step)] = float(value)

    def _stops(self) -> dict[int, str]:
        """Trials the early-stopping rule stops now, with its reason."""
        if not self.early_stopping or not self.intermediates:
            return {}
        from airflow_elastic.sweeps import stopping
        from airflow_elastic.sweeps.history import SweepHistory

        history = SweepHistory.from_json(self.history)
        # Steps the operator recorded were judged by an earlier wait; each newer one is judged in order, however
        # many one log read brought (an ASHA rung crossed by an earlier line is not skipped).
        decided = {t.number: -1 if t.last_step is None else t.last_step for t in history.trials}
        decided.update(self._decided)
        for number, values in self.intermediates.items():
            for step, value in values.items():
                history.record_intermediate(number, step, value)
        stops = {}
        for trial in history.running():
            since = decided.get(trial.number, -1)
            if trial.number not in self._views or trial.last_step is None or trial.last_step <= since:
                continue
            reason = stopping.decide(
                self.early_stopping, trial, history, mode=self.mode, since_step=since, **self.stopping_options
            )
            self._decided[trial.number] = trial.last_step
            if reason:
                stops[trial.number] = reason
        return stops

    # ----------------------------------------------------------------------------------------------- run

    @property
    def subject(self) -> str:
        """``the sweep's trials in <namespace>``."""
        return f"the sweep's trials in {self.namespace}"

    def failed(self, message: str) -> dict[str, Any]:
        """The ``error`` event."""
        return self._payload("error", message=message)

    async def release(self) -> None:
        """Stop following the trials' logs."""
        for view in self._views.values():
            await view._logs.close()

    def event(self, outcome: dict[str, Any]) -> Summarized:
        """``outcome`` with the intermediate values, log positions and output gathered (once the log streams are
        closed: the lines they took last count too), printed as one line."""
        payload = outcome
        payload["intermediates"] = [
            {"number": n, "values": [[s, v] for s, v in sorted(values.items())]}
            for n, values in sorted(self.intermediates.items())
        ]
        payload["logs"] = [{"number": n, "cursors": cursors} for n, cursors in sorted(self._cursors().items())]
        outputs = {n: view._logs.archive.to_payload() for n, view in self._views.items()}
        payload[OUTPUT_KEY] = [{"number": n, **output} for n, output in sorted(outputs.items()) if output]
        return Summarized(payload, self._summary(payload))

    def _summary(self, payload: Mapping[str, Any]) -> str:
        """The event in one line: each verdict and stop, and how many trials' output it archives."""
        ends = [f"trial {v['number']} {v['event']['status']}" for v in payload["verdicts"]]
        ends += [f"trial {s['number']} stopped early" for s in payload["stops"]]
        text = summary(payload["status"], f"sweep in {self.namespace}", payload.get("message") or "; ".join(ends))
        output = payload[OUTPUT_KEY]
        return text + (f", the output of {len(output)} trial(s) archived" if output else "")

    def _cursors(self) -> dict[int, dict[str, list[Any]]]:
        """Per trial, how far each of its leader pods' logs was shown: ``{pod uid: [second, nanoseconds, lines]}``."""
        found = {}
        for number, view in self._views.items():
            cursors = {uid: [*c.stamp, c.at_stamp] for uid, c in view._logs.logs.cursors.items() if c.stamp is not None}
            if cursors:
                found[number] = cursors
        return found

    def _payload(
        self,
        status: str,
        *,
        verdicts: Mapping[int, Any] | None = None,
        stops: Mapping[int, str] | None = None,
        message: str = "",
    ) -> dict[str, Any]:
        """The event: ``status`` (``verdicts``, ``stop``, ``budget`` or ``error``), the verdicts and the stops (the
        intermediate values and log positions gathered are added by :meth:`run`)."""
        verdicts, stops = verdicts or {}, stops or {}
        return {
            "status": status,
            "message": message,
            "verdicts": [{"number": n, "event": v.to_payload()} for n, v in sorted(verdicts.items())],
            "stops": [{"number": n, "reason": r} for n, r in sorted(stops.items())],
        }

    async def wait(self) -> dict[str, Any]:
        """Observe every running trial until one has a verdict, one is stopped early, or the budget runs out."""
        # The trial views share this trigger's hook (the one session).
        for view in self._views.values():
            view.__dict__["hook"] = self.hook
        async with contextlib.AsyncExitStack() as stack:
            # One observer (one JobSet list and watch for the namespace); a subscription per trial only so that a
            # watched change of any trial is delivered at once instead of at the next periodic snapshot.
            subscriptions = [
                await stack.enter_async_context(
                    JobSetObserver.subscribe(
                        self.hook,
                        conn_id=self.kubernetes_conn_id,
                        connection_extras=self.connection_extras,
                        namespace=self.namespace,
                        label_selector=MANAGED_SELECTOR,
                        poll_interval=self.poll_interval,
                        name=view.name,
                    )
                )
                for view in self._views.values()
            ]
            looked = False
            held: dict[int, Any] = {}  # successes held until every trial has a verdict (gather_successes)
            while True:
                wait = self._until_deadline(time.time()) if looked else None
                snapshot = await first_snapshot(subscriptions, wait)
                looked = True
                verdicts = {}
                for number, view in self._views.items():
                    if number in held:
                        continue
                    view._observer = subscriptions[0].observer
                    verdict = await self._observe(view, snapshot)
                    if verdict is not None:
                        verdicts[number] = verdict
                # Judged with every verdict too: what this look read is recorded, and never judged again.
                stops = {n: why for n, why in self._stops().items() if n not in verdicts and n not in held}
                if not self._hold(verdicts, stops, held):
                    verdicts = {**held, **verdicts}
                    if verdicts or stops:
                        return self._payload("verdicts" if verdicts else "stop", verdicts=verdicts, stops=stops)
                if self.deadline is not None and time.time() >= self.deadline:
                    return self._payload("budget", verdicts=held, message="the sweep's budget deadline passed")

    def _hold(self, verdicts: dict[int, Any], stops: dict[int, str], held: dict[int, Any]) -> bool:
        """With ``gather_successes``: add this look's successes to ``held`` and say whether to keep holding them
        (nothing but successes so far, and some trial still without a verdict)."""
        if not self.gather_successes or stops or any(v.status != "succeeded" for v in verdicts.values()):
            return False
        held.update(verdicts)
        waiting = len(self._views) - len(held)
        if verdicts and waiting:
            self.log.info("%d trial(s) succeeded; waiting for the %d still running", len(held), waiting)
        return bool(held) and waiting > 0

    def _until_deadline(self, now: float) -> float | None:
        found = [v._watch.until_deadline(now) for v in self._views.values()]
        found.append(None if self.deadline is None else max(0.0, self.deadline - now))
        known = [f for f in found if f is not None]
        return min(known) if known else None

    async def _observe(self, view: TrainingGroupTrigger, snapshot: Snapshot | None) -> Any:
        """One trial's look at ``snapshot`` (the steps of the group trigger's own loop): its verdict or ``None``."""
        view._looked_at = snapshot.started if snapshot is not None else float("inf")
        now = time.time()
        if snapshot is None:
            obs = Observation.tick(now)
        elif snapshot.error is not None:
            obs = Observation.failed(now, snapshot.error, transient=isinstance(snapshot.error, TRANSIENT_ERRORS))
        else:
            jobset = snapshot.jobsets.get(view.name)
            if jobset is None:
                jobset = await view._get()  # not in the watched cache yet, or gone
            view._version = ((jobset or {}).get("metadata") or {}).get("resourceVersion") or ""
            obs = Observation(now, jobset)
        step = await view._settle(obs)
        for record in step.records:
            view.log.info("JobSet %s/%s: %s", self.namespace, view.name, describe(record))
        if step.verdict is not None:
            return await view._report(step.verdict)
        if self.log_role and step.status is not None:
            await view._logs.follow(step.status.restarts)
        return None

    # ------------------------------------------------------------------------------------------- on_kill

    async def on_kill(self) -> None:
        """A user killed the deferred sweep: delete every running trial's JobSet (foreground) unless
        ``on_kill_action="keep"`` or the event already fired."""
        if self._fired or self.on_kill_action == "keep":
            return
        try:
            for view in self._views.values():
                view.__dict__["hook"] = self.hook
                jobset = await view._get()
                if jobset is not None and view._uid_matches(jobset):
                    view.log.info("deleting JobSet %s/%s (task killed)", self.namespace, view.name)
                    await self.hook.delete_jobset(self.namespace, view.name, propagation="Foreground")
        finally:
            await self._close_hook()
