"""The trigger's log follower as real kubelets serve logs: a sidecar, rotation, read errors, a chatty leader."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import msgspec
import structlog.testing

from airflow_elastic.hooks.errors import BadRequest
from airflow_elastic.triggers.training_group import TrainingGroupTrigger
from tests.support.logs import follow, leader, numbered
from tests.support.trigger_fakes import FakeHook, condition, jobset, stamped_log
from tests.support.triggers import NS, events_of, run


def test_a_sidecar_does_not_hide_the_trainers_log():
    hook = FakeHook()
    hook.pods = [leader(sidecar=True)]
    hook.logs[hook.pods[0]["metadata"]["name"]] = numbered(0, 3)
    assert follow(hook, finish_at=3) == ["line 0", "line 1", "line 2"]
    assert {r["container"] for r in hook.log_requests} == {"trainer"}


def test_kubelet_log_rotation_loses_no_line():
    hook = FakeHook()
    hook.pods = [leader()]
    name = hook.pods[0]["metadata"]["name"]
    hook.logs[name] = numbered(0, 10)

    def rotate() -> None:  # the shown lines went to the rotated file; the served log starts over
        hook.logs[name] = numbered(0, 30)
        hook.rotated[name] = 10

    assert follow(hook, finish_at=4, grow={3: rotate}) == [f"line {i}" for i in range(30)]


def test_a_read_error_is_a_warning_once():
    hook = FakeHook()
    hook.pods = [leader()]
    name = hook.pods[0]["metadata"]["name"]
    hook.logs[name] = numbered(0, 3)
    hook.log_errors[name] = BadRequest(400, "BadRequest", 'container "trainer" in pod is waiting to start')
    hook.jobsets["train"] = jobset("train")
    hook.on_list = lambda n: (
        hook.jobsets.update(train=jobset("train", conditions=[condition("Completed")])) if n == 6 else None
    )
    trigger = TrainingGroupTrigger("train", NS, "elastic", poll_interval=0.01, log_role="leader")
    trigger.hook = hook  # type: ignore[misc]
    with structlog.testing.capture_logs() as logs:
        run(trigger)
    warnings = [e for e in logs if e["log_level"] == "warning" and "could not read the log" in e["event"]]
    assert len(warnings) == 1 and "trainer" in warnings[0]["event"] and "waiting to start" in warnings[0]["event"]
    assert hook.calls["stream_pod_log"] >= 3  # it kept trying


def test_a_leader_printing_20000_lines_does_not_block_the_event_loop(monkeypatch):
    """Every line reaches the task log, the big reply is parsed off the loop, and the loop gets a turn at least every
    :data:`~airflow_elastic.triggers.logs.LINES_PER_SLICE` lines written: a bound in lines, not seconds, so it holds
    however loaded the machine is."""
    from airflow_elastic.triggers import logs as follower

    poll = 0.5
    hook = FakeHook()
    hook.pods = [leader()]
    name = hook.pods[0]["metadata"]["name"]
    hook.logs[name] = ""
    burst = "".join(f"step {i} loss={1 / (i + 1):.6f} lr=0.0003 tokens/s=123456\n" for i in range(20_000))

    stamped_log(burst)  # the fake kubelet's own work, done before the clock starts

    def progress(n: int) -> None:  # the whole burst lands between two polls
        if n == 2:
            hook.logs[name] = burst
        if n == 4:
            hook.jobsets["train"] = jobset("train", conditions=[condition("Completed")])

    threaded: list[str] = []
    to_thread = asyncio.to_thread

    async def recording_to_thread(function: Any, *args: Any, **kwargs: Any) -> Any:
        threaded.append(getattr(function, "__name__", repr(function)))
        return await to_thread(function, *args, **kwargs)

    monkeypatch.setattr(follower.asyncio, "to_thread", recording_to_thread)
    written: list[int] = []  # lines in the task log at each of the probe's turns

    async def probe(done: asyncio.Event, logs: list[Any]) -> None:
        while not done.is_set():
            written.append(len(logs))
            await asyncio.sleep(0)

    async def main(logs: list[Any]) -> list[dict[str, Any]]:
        done = asyncio.Event()
        lag = asyncio.create_task(probe(done, logs))
        hook.jobsets["train"] = jobset("train")
        hook.on_list = progress
        trigger = TrainingGroupTrigger("train", NS, "elastic", poll_interval=poll, log_role="leader")
        trigger.hook = hook  # type: ignore[misc]
        try:
            return await events_of(trigger)
        finally:
            done.set()
            await lag

    with structlog.testing.capture_logs() as logs:
        events = asyncio.run(main(logs))
    assert [e["status"] for e in events] == ["succeeded"]
    lines = [e["event"] for e in logs if e["event"].startswith(f"[{name}] step ")]
    assert len(lines) == 20_000 and lines[-1].startswith(f"[{name}] step 19999 ")
    assert "take" in threaded  # the 20,000-line reply was parsed in a thread
    most = max(after - before for before, after in itertools.pairwise(written))
    assert most <= follower.LINES_PER_SLICE + 5, f"{most} lines written without giving the loop a turn"


def test_the_lines_shown_come_back_in_the_event_which_prints_as_one_line():
    """The triggerer's log file of a wait is overwritten by the next wait of the try: the event carries the lines
    (marker lines as progress) for the worker's task log, and Airflow's comms encode it as a plain dict."""
    from airflow.sdk.execution_time.comms import _new_encoder

    from airflow_elastic.contract.markers import format_line

    hook = FakeHook()
    hook.pods = [leader()]
    name = hook.pods[0]["metadata"]["name"]
    hook.logs[name] = f"epoch 1\n{format_line(1, {'val_loss': 0.5})}\nepoch 2\n"
    hook.jobsets["train"] = jobset("train")
    hook.on_list = lambda n: hook.jobsets.update(train=jobset("train", conditions=[condition("Completed")]))
    trigger = TrainingGroupTrigger("train", NS, "elastic", poll_interval=0.01, log_role="leader")
    trigger.hook = hook  # type: ignore[misc]

    async def whole() -> list[Any]:
        return [event async for event in trigger.run()]

    [event] = asyncio.run(asyncio.wait_for(whole(), 20))
    output = event.payload["output"]
    assert output["lines"] == [f"[{name}] epoch 1", f"[{name}] step 1: val_loss=0.5", f"[{name}] epoch 2"]
    assert output["sources"] == [f"kubectl logs -n {NS} {name} -c trainer"] and output["dropped"] == 0
    assert repr(event) == f"TriggerEvent<JobSet {NS}/train: succeeded, 3 output line(s) archived>"
    sent = _new_encoder().encode(event)  # what the triggerer sends its supervisor
    assert msgspec.msgpack.decode(sent)["payload"] == dict(event.payload)
