"""``TrainingGroupSensor``: wait for an existing training group (a JobSet) to succeed.

Cheap to import (DAG files are parsed every 30 s): the hook, the Kubernetes clients and the trigger are imported
inside the methods that use them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout

from airflow_elastic.training.state import GroupEvent, GroupStatus, PodFailure
from airflow_elastic.waiting.outage import DEFAULT_API_OUTAGE_TOLERANCE

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_elastic.hooks.protocol import TrainingGroupHookProtocol
    from airflow_elastic.waiting.watch import Watch


class TrainingGroupSensor(BaseSensorOperator):
    """Wait until a training group's JobSet succeeds; fail when it fails or disappears.

    The group is named directly (``name="nightly-train"``) or taken from the upstream ``TrainingGroupOperator``'s
    result (``name="{{ ti.xcom_pull(task_ids='train')['name'] }}"``, and likewise ``namespace``). The sensor
    follows whatever JobSet carries that name, and never deletes it: it did not create it.

    By default it defers to :class:`~airflow_elastic.triggers.training_group.TrainingGroupTrigger` (no worker slot
    while waiting; ``on_kill_action="keep"``); with ``deferrable=False`` it pokes with the blocking hook, in
    ``mode="poke"`` or ``"reschedule"``. Both judge the JobSet with the same
    :class:`~airflow_elastic.waiting.watch.Watch`.
    The usual sensor arguments apply: ``poke_interval`` (also the trigger's poll interval), ``timeout`` (counted
    from the start of this try; past it: ``AirflowSensorTimeout``), ``soft_fail`` (skip instead of failing, also
    when the group fails).

    Args:
        name: the JobSet's name (templated).
        namespace: its namespace (templated); default: the connection's namespace, else ``default``.
        kubernetes_conn_id: the Airflow ``kubernetes`` connection to the cluster.
        metrics_role: the role whose termination-message JSON is returned as ``metrics``.
        deferrable: wait in the triggerer (default) instead of poking from a worker.
        api_outage_tolerance: seconds of Kubernetes API failures in a row (5xx, 429, no reply) a wait rides out
            before it fails (default 300; see ``TrainingGroupOperator``).

    Returns:
        ``{"name", "namespace", "uid", "phase", "restarts", "metrics"}`` (pushed as XCom ``return_value``).

    Raises:
        AirflowFailException: the group failed (the message names the group, the reason and each failed pod), or no
            JobSet of that name exists. Not retried: the group's outcome is final.
        AirflowSensorTimeout: ``timeout`` passed first.
        AirflowException: the cluster could not be observed (retried as usual).
    """

    template_fields: Sequence[str] = ("name", "namespace")
    ui_color = "#d6e6f2"

    def __init__(
        self,
        *,
        name: str,
        namespace: str | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        metrics_role: str = "",
        deferrable: bool = True,
        api_outage_tolerance: float = DEFAULT_API_OUTAGE_TOLERANCE,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.name = name
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.metrics_role = metrics_role
        self.deferrable = deferrable
        self.api_outage_tolerance = float(api_outage_tolerance)
        self._watch: Watch | None = None

    def hook(self) -> TrainingGroupHookProtocol:
        """The blocking hook for the connection (imported here to keep DAG parsing cheap)."""
        from airflow_elastic.hooks.group import TrainingGroupHook

        return TrainingGroupHook(self.kubernetes_conn_id)

    def _namespace(self, hook: TrainingGroupHookProtocol) -> str:
        return self.namespace or hook.get_namespace() or "default"

    # ------------------------------------------------------------------------------------------------ poke

    def poke(self, context: Context) -> bool | PokeReturnValue:
        """One look at the JobSet: done (with the result), still waiting, or an exception when it failed."""
        hook = self.hook()
        result = self._check(hook, self._namespace(hook))
        return False if result is None else PokeReturnValue(True, result)

    def _check(self, hook: TrainingGroupHookProtocol, namespace: str) -> dict[str, Any] | None:
        """One look through the same :class:`~airflow_elastic.waiting.watch.Watch` the trigger uses: ``None`` while the
        group runs, else :meth:`_verdict` of it (the watch lives as long as this task instance: in ``poke`` mode
        transient API errors end the wait once they outlast ``api_outage_tolerance``; in ``reschedule`` mode the
        sensor ``timeout`` does)."""
        from airflow_elastic.operators.training.waiting import observe, settle
        from airflow_elastic.waiting.settings import WaitSettings
        from airflow_elastic.waiting.watch import Watch

        if self._watch is None or self._watch.namespace != namespace:
            settings = WaitSettings(metrics_role=self.metrics_role, api_outage_tolerance=self.api_outage_tolerance)
            self._watch = Watch(self.name, namespace, settings)
        step = settle(self._watch, hook, observe(hook, namespace, self.name), self.log)
        if step.verdict is None:
            self.log.info("JobSet %s/%s is %s", namespace, self.name, step.status.phase if step.status else "unseen")
            return None
        return self._verdict(step.verdict)

    # ------------------------------------------------------------------------------------------ deferrable

    def execute(self, context: Context) -> Any:
        """Poke (``deferrable=False``), or check once and defer to ``TrainingGroupTrigger`` until it fires."""
        if not self.deferrable:
            return super().execute(context)
        from airflow_elastic.triggers.training_group import TrainingGroupTrigger
        from airflow_elastic.waiting.settings import WaitSettings

        hook = self.hook()
        namespace = self._namespace(hook)
        result = self._check(hook, namespace)
        if result is not None:
            return result
        trigger = TrainingGroupTrigger(
            self.name,
            namespace,
            self.kubernetes_conn_id,
            wait=WaitSettings(
                poll_interval=self.poke_interval,
                deadline=time.time() + self.timeout,
                metrics_role=self.metrics_role,
                api_outage_tolerance=self.api_outage_tolerance,
            ),
            on_kill_action="keep",
            connection_extras=hook.get_connection_extras(),
        )
        # The trigger's deadline answers first; the deferral timeout is a backstop for a lost triggerer.
        backstop = timedelta(seconds=self.timeout + max(60.0, 2 * self.poke_interval))
        from airflow_elastic.operators import deferral

        deferral.defer(self, trigger, method_name="execute_complete", timeout=backstop)

    def execute_complete(self, context: Context, event: Mapping[str, Any]) -> dict[str, Any]:
        """Turn the trigger's event into the result, or the matching exception (see the class docstring)."""
        return self._verdict(GroupEvent.from_payload(event))

    def _verdict(self, got: GroupEvent) -> dict[str, Any]:
        if got.status == "succeeded":
            self.log.info("JobSet %s/%s succeeded", got.namespace, got.name)
            return _result(got.namespace, got.name, got.uid, got.phase, got.restarts, got.metrics)
        if got.status == "timeout":
            raise AirflowSensorTimeout(
                f"Sensor has timed out: JobSet {got.namespace}/{got.name} did not finish within {self.timeout} s"
            )
        if got.status == "missing":
            raise AirflowFailException(_missing_message(got.namespace, got.name, got.message))
        if got.status in ("failed", "startup_timeout"):
            status = GroupStatus("Failed", got.reason or got.status, got.message, got.restarts, got.restarts_counted)
            failures = [PodFailure(**f) for f in got.failures]
            raise AirflowFailException(_failed_message(got.namespace, got.name, status, failures))
        raise AirflowException(f"Could not watch JobSet {got.namespace}/{got.name}: {got.message}")


def _result(
    namespace: str, name: str, uid: str, phase: str, restarts: int, metrics: dict[str, Any] | None
) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "uid": uid, "phase": phase, "restarts": restarts, "metrics": metrics}


def _missing_message(namespace: str, name: str, detail: str = "") -> str:
    why = detail or "deleted, removed by its TTL, or never created"
    return f"JobSet {namespace}/{name} does not exist ({why}): there is no training group to wait for"


def _failed_message(namespace: str, name: str, status: GroupStatus, failures: Iterable[PodFailure]) -> str:
    lines = [f"Training group JobSet {namespace}/{name} failed: {status.reason or 'Failed'}"]
    if status.message:
        lines[0] += f": {status.message}"
    lines += [f"  - {failure.describe()}" for failure in failures]
    if status.restarts:
        lines.append(f"  ({status.restarts} restarts, {status.restarts_counted} counted against maxRestarts)")
    return "\n".join(lines)
