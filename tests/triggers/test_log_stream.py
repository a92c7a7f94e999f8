"""The trigger follows its log pod with one stream, not one read per poll: resumed after a drop, read per poll where
a stream is refused, closed when the wait ends."""

from __future__ import annotations

from typing import Any

from airflow_elastic.hooks.errors import Forbidden
from tests.support.logs import follow, leader, numbered
from tests.support.trigger_fakes import FakeHook, jobset, pod


def growing(hook: FakeHook, polls: int, per_poll: int = 3, *, finish: bool = True) -> dict[int, Any]:
    """The leader logs ``per_poll`` more lines at each of ``polls`` polls, then (``finish``) stops."""
    name = hook.pods[0]["metadata"]["name"]
    hook.logs[name] = ""

    def grow(n: int) -> None:
        hook.logs[name] = numbered(0, n * per_poll)
        if n == polls and finish:
            hook.pods[0]["status"]["phase"] = "Succeeded"

    return {n: (lambda n=n: grow(n)) for n in range(1, polls + 1)}


def test_a_running_pod_is_followed_with_one_request_over_many_polls():
    hook = FakeHook()
    hook.pods = [leader()]
    lines = follow(hook, finish_at=31, grow=growing(hook, polls=30))
    assert lines == [f"line {i}" for i in range(90)]  # each once, in order
    assert (hook.calls["stream_pod_log"], hook.calls["read_pod_log_chunk"]) == (1, 0)
    assert hook.log_requests[0]["container"] == "trainer" and hook.log_requests[0]["request"].follow
    assert hook.streams_open == 0


def test_a_dropped_stream_resumes_without_loss_or_duplication():
    hook = FakeHook()
    hook.pods = [leader()]
    hook.drops = [7, 20]  # the first two streams drop mid-line, after 7 and 20 lines
    lines = follow(hook, finish_at=31, grow=growing(hook, polls=30))
    assert lines == [f"line {i}" for i in range(90)]
    assert hook.calls["stream_pod_log"] == 3
    assert [r["request"].since_time is not None for r in hook.log_requests] == [False, True, True]
    assert hook.streams_open == 0


def test_a_stream_broken_by_anything_else_is_resumed_too():
    hook = FakeHook()
    hook.pods = [leader()]
    hook.drops, hook.drop_error = [7], RuntimeError("the chunked decoder broke")
    lines = follow(hook, finish_at=12, grow=growing(hook, polls=10))
    assert lines == [f"line {i}" for i in range(30)]
    assert hook.calls["stream_pod_log"] == 2


def test_a_refused_stream_is_read_per_poll_after_one_warning():
    hook = FakeHook()
    hook.pods = [leader()]
    hook.stream_error = Forbidden(403, "Forbidden", "streaming is not allowed through this proxy")
    logs: list[dict[str, Any]] = []
    lines = follow(hook, finish_at=11, grow=growing(hook, polls=10), logged=logs)
    assert lines == [f"line {i}" for i in range(30)]
    warnings = [e["event"] for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 1 and "once per poll instead" in warnings[0] and "proxy" in warnings[0]
    assert hook.calls["stream_pod_log"] == 1 and hook.calls["read_pod_log_chunk"] >= 5


def test_the_stream_is_closed_when_the_wait_ends_while_the_pod_still_runs():
    hook = FakeHook()
    hook.pods = [leader()]
    lines = follow(hook, finish_at=6, grow=growing(hook, polls=5, finish=False))
    assert lines == [f"line {i}" for i in range(15)]
    assert hook.calls["stream_pod_log"] == 1 and hook.streams_open == 0


def test_a_restarts_new_pod_is_followed_at_once_while_the_old_one_lingers():
    hook = FakeHook()
    old = leader()
    new = pod("train", "leader", phase="Running", attempt=1)
    new["metadata"]["name"] = "train-leader-0-0-fghij"
    new["spec"] = old["spec"]
    hook.pods = [old]
    hook.logs[old["metadata"]["name"]] = numbered(0, 3)

    def restart() -> None:  # the old pod still terminates (Running) when the new one starts
        hook.pods.append(new)
        hook.logs[new["metadata"]["name"]] = numbered(100, 103)
        hook.jobsets["train"] = jobset("train", restarts=1)

    follow(hook, finish_at=8, grow={4: restart, 5: lambda: hook.jobsets.update(train=jobset("train", restarts=1))})
    assert [(r["pod"], r["request"].follow) for r in hook.log_requests][:2] == [
        (old["metadata"]["name"], True),
        (new["metadata"]["name"], True),
    ]
