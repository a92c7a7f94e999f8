"""``SweepTrigger``: one wait for every running trial, fired by a verdict, an early stop or a spent budget."""

from __future__ import annotations

import asyncio
import importlib
import time
from typing import Any

from airflow_elastic.contract.markers import format_line
from airflow_elastic.sweeps.history import SweepHistory, Trial
from airflow_elastic.triggers.observer import JobSetObserver
from airflow_elastic.triggers.sweep import SweepTrigger
from tests.support.trigger_fakes import FakeHook, condition, jobset, pod

NS = "ns"
RUNNING = {"replicatedJobsStatus": [{"name": "leader", "ready": 1}]}


def trials(*numbers: int) -> list[dict[str, Any]]:
    return [
        {"number": n, "name": f"sw-t{n}", "watch": {"uid": f"uid-sw-t{n}", "metrics_role": "leader"}} for n in numbers
    ]


def run(trigger: SweepTrigger, hook: FakeHook) -> dict[str, Any]:
    trigger.hook = hook  # type: ignore[misc]

    async def first() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("no event")

    payload = asyncio.run(asyncio.wait_for(first(), 20))
    assert JobSetObserver.registry == {}  # the one subscription was given up
    return payload


def rebuilt(trigger: SweepTrigger) -> SweepTrigger:
    """The trigger as the triggerer rebuilds it from ``serialize()``."""
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    return getattr(importlib.import_module(module), name)(**kwargs)


def test_one_trigger_watches_every_trial_and_fires_on_the_first_verdict():
    hook = FakeHook()
    hook.jobsets = {"sw-t1": jobset("sw-t1", **RUNNING), "sw-t2": jobset("sw-t2", **RUNNING)}
    hook.pods = [pod("sw-t1", "leader", phase="Running"), pod("sw-t2", "leader", phase="Running")]
    hook.on_list = lambda n: hook.jobsets["sw-t2"].update(
        jobset("sw-t2", conditions=[condition("Completed", "AllJobsCompleted")])
    )
    trigger = rebuilt(SweepTrigger(trials(1, 2), NS, "k8s", poll_interval=0.01, objective="loss"))
    payload = run(trigger, hook)
    assert payload["status"] == "verdicts"
    [verdict] = payload["verdicts"]
    assert (verdict["number"], verdict["event"]["status"], verdict["event"]["name"]) == (2, "succeeded", "sw-t2")
    assert hook.calls["list_jobsets"] >= 1 and hook.namespaces == {NS}


def test_the_stopping_rule_stops_a_trial_from_the_intermediate_values_in_its_leaders_log():
    history = SweepHistory(
        [
            Trial(1, {"x": 0.3}, "complete", 0.0, intermediate={1: 0.1, 2: 0.1}),
            Trial(2, {"x": 0.4}, "complete", 0.01, intermediate={1: 0.2, 2: 0.1}),
            Trial(3, {"x": 9.0}, "running"),
        ]
    )
    hook = FakeHook()
    hook.jobsets = {"sw-t3": jobset("sw-t3", **RUNNING)}
    leader = pod("sw-t3", "leader", phase="Running")
    hook.pods = [leader]
    hook.logs = {
        leader["metadata"]["name"]: f"starting\n{format_line(1, {'loss': 50.0})}\n{format_line(2, {'loss': 40.0})}\n"
    }
    trigger = SweepTrigger(
        trials(3),
        NS,
        "k8s",
        history=history.to_json(),
        objective="loss",
        early_stopping="median",
        stopping_options={"min_trials_required": 2, "start_step": 2},
        poll_interval=0.01,
        log_role="leader",
    )
    payload = run(rebuilt(trigger), hook)
    assert payload["status"] == "stop", payload
    [stop] = payload["stops"]
    assert stop["number"] == 3 and "median" in stop["reason"], stop
    assert payload["intermediates"] == [{"number": 3, "values": [[1, 50.0], [2, 40.0]]}]
    assert hook.deleted == []  # the operator deletes the group, not the trigger


def test_a_passing_budget_deadline_fires_with_the_trials_still_running():
    hook = FakeHook()
    hook.jobsets = {"sw-t1": jobset("sw-t1", **RUNNING)}
    hook.pods = [pod("sw-t1", "leader", phase="Running")]
    trigger = SweepTrigger(trials(1), NS, "k8s", poll_interval=0.01, deadline=time.time() + 0.3)
    payload = run(trigger, hook)
    assert payload["status"] == "budget" and payload["verdicts"] == [], payload


def test_a_failure_of_the_wait_is_an_event_not_an_exception():
    hook = FakeHook()
    trigger = SweepTrigger(trials(1), NS, "k8s", poll_interval=0.01)
    trigger._observe = None  # type: ignore[assignment,method-assign]  # anything that breaks the loop itself
    payload = run(trigger, hook)
    assert payload["status"] == "error" and "failed" in payload["message"], payload


def test_on_kill_deletes_every_running_trial_in_the_foreground():
    hook = FakeHook()
    hook.jobsets = {"sw-t1": jobset("sw-t1"), "sw-t2": jobset("sw-t2"), "other": jobset("other")}
    trigger = SweepTrigger(trials(1, 2), NS, "k8s")
    trigger.hook = hook  # type: ignore[misc]
    asyncio.run(trigger.on_kill())
    assert sorted(hook.deleted) == [(NS, "sw-t1", "Foreground"), (NS, "sw-t2", "Foreground")]


def test_a_watched_trial_end_is_judged_at_once_not_at_the_next_periodic_look():
    """With a poll interval far longer than the test's bound, only a delivery of the watched change can end the wait
    in time: the observer's periodic snapshot would come an hour later."""
    from tests.support.waiting import until
    from tests.support.watching_hook import WatchingHook

    hook = WatchingHook()
    for name in ("sw-t1", "sw-t2"):
        hook.update_jobset(jobset(name, **RUNNING))
    hook.pods = [pod("sw-t1", "leader", phase="Running"), pod("sw-t2", "leader", phase="Running")]
    trigger = SweepTrigger(trials(1, 2), NS, "k8s", poll_interval=3600)
    trigger.hook = hook  # type: ignore[misc]

    async def scenario() -> dict[str, Any]:
        events = trigger.run()
        first = asyncio.ensure_future(anext(events))
        await until(lambda: hook.streams["jobsets"])  # the one JobSet watch is open
        await asyncio.sleep(0.05)
        hook.update_jobset(jobset("sw-t1", conditions=[condition("Completed", "AllJobsCompleted")]))
        return (await asyncio.wait_for(first, 10)).payload

    payload = asyncio.run(scenario())
    assert [(v["number"], v["event"]["status"]) for v in payload["verdicts"]] == [(1, "succeeded")], payload
    assert hook.calls["watch_jobsets"] == 1 and hook.calls["list_jobsets"] == 1  # one shared list and watch


def test_every_step_one_log_read_brings_is_judged_not_only_the_latest():
    """Steps 1, 2 and 4 arrive in one read: ASHA stops the trial at the rung of step 1, which judging step 4 alone
    (where it leads) would skip."""
    history = SweepHistory(
        [
            Trial(1, {"x": 1}, "complete", 0.1, intermediate={1: 0.1, 2: 0.1, 4: 0.1}),
            Trial(2, {"x": 2}, "complete", 5.0, intermediate={1: 0.2, 2: 0.2, 4: 5.0}),
            Trial(3, {"x": 3}, "running"),
        ]
    )
    hook = FakeHook()
    hook.jobsets = {"sw-t3": jobset("sw-t3", **RUNNING)}
    leader = pod("sw-t3", "leader", phase="Running")
    hook.pods = [leader]
    lines = [format_line(step, {"loss": value}) for step, value in ((1, 9.0), (2, 9.0), (4, 0.05))]
    hook.logs = {leader["metadata"]["name"]: "\n".join(lines) + "\n"}
    trigger = SweepTrigger(
        trials(3),
        NS,
        "k8s",
        history=history.to_json(),
        objective="loss",
        early_stopping="asha",
        stopping_options={"min_resource": 1, "reduction_factor": 2},
        poll_interval=0.01,
        log_role="leader",
    )
    payload = run(trigger, hook)
    assert [(s["number"], "step 1" in s["reason"]) for s in payload["stops"]] == [(3, True)], payload


class Lines:
    """A logger that keeps what it is given."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str, *args: Any) -> None:
        self.lines.append(message % args)

    warning = error = debug = exception = info


def shown_by(trigger: SweepTrigger, hook: FakeHook) -> tuple[dict[str, Any], list[str]]:
    """Run ``trigger`` until the JobSet it watches completes (at its third list); its event and the log lines it
    wrote for the trial."""
    recorder = Lines()
    for view in trigger._views.values():
        view._log._log = recorder  # type: ignore[attr-defined]
    lists = hook.calls["list_jobsets"]
    done = jobset("sw-t1", conditions=[condition("Completed", "AllJobsCompleted")])
    hook.on_list = lambda n: hook.jobsets.update({"sw-t1": done}) if n - lists >= 3 else None
    payload = run(trigger, hook)
    return payload, [line for line in recorder.lines if "step" in line]


def test_a_re_deferral_repeats_no_log_line_of_a_trial():
    hook = FakeHook()
    hook.jobsets = {"sw-t1": jobset("sw-t1", **RUNNING)}
    leader = pod("sw-t1", "leader", phase="Running")
    hook.pods = [leader]
    name = leader["metadata"]["name"]
    hook.logs = {name: "step 1\nstep 2\n"}
    first, shown = shown_by(SweepTrigger(trials(1), NS, "k8s", poll_interval=0.01, log_role="leader"), hook)
    assert [line.rsplit(" ", 2)[-2:] for line in shown] == [["step", "1"], ["step", "2"]], shown
    [logs] = first["logs"]
    assert logs["number"] == 1 and list(logs["cursors"]) == [leader["metadata"]["uid"]]

    # The operator waits again (the trial still runs); one more line was logged meanwhile.
    hook.jobsets = {"sw-t1": jobset("sw-t1", **RUNNING)}
    hook.logs = {name: "step 1\nstep 2\nstep 3\n"}
    again = [{**trials(1)[0], "logs": logs["cursors"]}]
    _, shown = shown_by(SweepTrigger(again, NS, "k8s", poll_interval=0.01, log_role="leader"), hook)
    assert [line.rsplit(" ", 2)[-2:] for line in shown] == [["step", "3"]], shown


def finish_in_turn(hook: FakeHook, *ends: tuple[str, str, str]) -> None:
    """Before each JobSet list, the next of ``ends`` (name, condition, reason) happens to its trial."""
    pending = list(ends)

    def on_list(_: int) -> None:
        if pending:
            name, kind, reason = pending.pop(0)
            hook.jobsets[name].update(jobset(name, conditions=[condition(kind, reason)]))

    hook.on_list = on_list


def test_with_no_trial_left_to_start_successes_are_gathered_into_one_event():
    hook = FakeHook()
    hook.jobsets = {"sw-t1": jobset("sw-t1", **RUNNING), "sw-t2": jobset("sw-t2", **RUNNING)}
    hook.pods = [pod("sw-t1", "leader", phase="Running"), pod("sw-t2", "leader", phase="Running")]
    finish_in_turn(hook, ("sw-t2", "Completed", "AllJobsCompleted"), ("sw-t1", "Completed", "AllJobsCompleted"))
    trigger = rebuilt(SweepTrigger(trials(1, 2), NS, "k8s", poll_interval=0.01, gather_successes=True))
    payload = run(trigger, hook)
    assert payload["status"] == "verdicts"
    assert [(v["number"], v["event"]["status"]) for v in payload["verdicts"]] == [(1, "succeeded"), (2, "succeeded")]


def test_a_gathered_sweep_still_fires_at_once_on_a_failure_with_the_successes_held_so_far():
    hook = FakeHook()
    names = ("sw-t1", "sw-t2", "sw-t3")
    hook.jobsets = {n: jobset(n, **RUNNING) for n in names}
    hook.pods = [pod(n, "leader", phase="Running") for n in names]
    finish_in_turn(hook, ("sw-t2", "Completed", "AllJobsCompleted"), ("sw-t3", "Failed", "FailedJobs"))
    trigger = SweepTrigger(trials(1, 2, 3), NS, "k8s", poll_interval=0.01, gather_successes=True)
    payload = run(trigger, hook)
    assert [(v["number"], v["event"]["status"]) for v in payload["verdicts"]] == [(2, "succeeded"), (3, "failed")]


def test_a_passing_budget_deadline_carries_the_gathered_successes():
    hook = FakeHook()
    hook.jobsets = {"sw-t1": jobset("sw-t1", **RUNNING), "sw-t2": jobset("sw-t2", **RUNNING)}
    hook.pods = [pod("sw-t1", "leader", phase="Running"), pod("sw-t2", "leader", phase="Running")]
    finish_in_turn(hook, ("sw-t2", "Completed", "AllJobsCompleted"))
    trigger = SweepTrigger(
        trials(1, 2), NS, "k8s", poll_interval=0.01, gather_successes=True, deadline=time.time() + 0.5
    )
    payload = run(trigger, hook)
    assert payload["status"] == "budget"
    assert [(v["number"], v["event"]["status"]) for v in payload["verdicts"]] == [(2, "succeeded")]


def test_a_trials_marker_lines_are_progress_in_the_task_log_and_its_output_comes_back_in_the_event():
    hook = FakeHook()
    hook.jobsets = {"sw-t1": jobset("sw-t1", **RUNNING)}
    leader = pod("sw-t1", "leader", phase="Running")
    hook.pods = [leader]
    name = leader["metadata"]["name"]
    hook.logs = {name: f"step 1 done\n{format_line(1, {'loss': 0.75})}\n"}
    trigger = SweepTrigger(trials(1), NS, "k8s", poll_interval=0.01, log_role="leader", objective="loss")
    recorder = Lines()
    trigger._views[1]._log._log = recorder  # type: ignore[attr-defined]
    done = jobset("sw-t1", conditions=[condition("Completed", "AllJobsCompleted")])
    hook.on_list = lambda n: hook.jobsets.update({"sw-t1": done}) if n >= 3 else None
    payload = run(trigger, hook)
    shown = [f"[{name}] step 1 done", f"[{name}] step 1: loss=0.75"]
    assert [line for line in recorder.lines if line.startswith(f"[trial 1] [{name}]")] == [
        f"[trial 1] {line}" for line in shown
    ]
    assert not any("AE_INTERMEDIATE" in line for line in recorder.lines)
    assert payload["intermediates"] == [{"number": 1, "values": [[1, 0.75]]}]  # still read from the marker
    [output] = payload["output"]
    assert (output["number"], output["lines"]) == (1, shown)
    assert repr(payload) == f"sweep in {NS}: verdicts (trial 1 succeeded), the output of 1 trial(s) archived"


def test_an_api_outage_is_ridden_out_and_logged_once_for_all_trials():
    import structlog.testing

    from airflow_elastic.hooks.errors import ServerError

    hook = FakeHook()
    done = jobset("sw-t2", conditions=[condition("Completed", "AllJobsCompleted")])
    hook.jobsets = {"sw-t1": jobset("sw-t1", **RUNNING), "sw-t2": done, "sw-t3": jobset("sw-t3", **RUNNING)}
    hook.list_errors = [ServerError(503, "ServiceUnavailable", "upgrading")] * 8  # the old limit was three
    trigger = SweepTrigger(trials(1, 2, 3), NS, "k8s", poll_interval=0.01, objective="loss")
    with structlog.testing.capture_logs() as logs:
        payload = run(trigger, hook)
    assert payload["status"] == "verdicts" and [v["number"] for v in payload["verdicts"]] == [2]
    said = [str(e["event"]) for e in logs if "The Kubernetes API" in str(e["event"])]
    assert len(said) == 2, said  # the start and the end, not once per trial
