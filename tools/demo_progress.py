"""What ``make demo`` prints while the nightly pipeline runs: short progress lines from ``airflow dags test``'s output.

``airflow dags test`` runs the DAG's tasks one after another in one process and prints every task's log (and the
triggers' logs, run inline) as ``<time> [<level>] <message> [<logger>] key=value ...``. :class:`Progress` reads
those lines and keeps what tells a person how far along the run is: each task's start and end, the batch stages'
output, the sweep's per-trial lines, the final training's quorum changes, healing, checkpoints, resumes and restarts,
the publish decision, the model's rollout to KServe (each awaited step, the smoke request's answer), and every error.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence

#: The message of an Airflow log line: ``<time> [info     ] <message> [<logger>] key=value ...`` (a message may hold
#: brackets too: the logger is the last bracketed name before the key=value pairs).
LOG_LINE = re.compile(r"^\S+ \[(info|warning|error|critical)\s*\] (.*) \[[\w.<>-]+\](?: \w+=.*)?$")
STARTED = re.compile(r"\[DAG TEST\] starting task_id=(\S+)")
ENDED = re.compile(r"\[DAG TEST\] end task task_id=(\S+)")
NEW_STATE = re.compile(r"new_state=(\w+)")
#: A line a trigger or waiter copied from a pod's log: ``[<pod>] <line>``.
POD_LINE = re.compile(r"^\[([a-z0-9][a-z0-9.-]*)\] (.*)$")

#: task id -> messages worth showing while that task runs (pod lines are matched on the pod's own text).
SHOW: Mapping[str, re.Pattern[str]] = {
    "prepare": re.compile(r"wrote |rows"),
    "sweep": re.compile(r"^trial \d+/\d+ |^best |warm|budget"),  # the sweep's own lines, not its trials' logs
    "train": re.compile(
        r"resum|saved .*checkpoint|lost|restart|preempt|resubmit|rank 0/|final metrics|^epoch \d+: |"
        r"attempt \d+:|succeeded after|training epochs|quorum of|healed from"  # the last three: torchft replica groups
    ),
    "evaluate": re.compile(r"test|accuracy|loaded"),
    "publish": re.compile(r"^promotion:"),  # the whole report is printed at the end
    "serve": re.compile(
        r"^(Created|Patched) InferenceService|already has this spec|^[Ww]aiting for \S+ to serve|^Smoke request|"
        r"InferenceService \S+ serves|^Rolling \S+ back"
    ),
}
#: Lines those patterns catch that say nothing to a person watching.
HIDE = re.compile(r"^waiting up to|^Checkpoint interval")
#: The final training's per-epoch validation (``runtime.report_intermediate``, which the task log shows as
#: ``step 25: val_loss=0.312345``), shown every ``EPOCH_EVERY`` epochs.
EPOCH = re.compile(r"^step (\d+): (\w+=\S+(?:, \w+=\S+)*)$")
EPOCH_EVERY = 25


class Progress:
    """Feed it ``airflow dags test`` output line by line; it calls ``emit`` with the lines worth showing.

    Args:
        tasks: the DAG's task ids (for ``task 2/5``).
        emit: where lines go (``print``).
        clock: seconds, for the duration of each task.
    """

    def __init__(
        self,
        tasks: Sequence[str],
        emit: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tasks, self.emit, self.clock = list(tasks), emit, clock
        self.current: str | None = None
        self.started: dict[str, float] = {}
        self.states: dict[str, str] = {}
        self.seen: set[str] = set()

    def say(self, task: str | None, text: str) -> None:
        self.emit(f"[{task or 'dag'}] {text}")

    def feed(self, line: str) -> None:
        line = line.rstrip("\n")
        if found := STARTED.search(line):
            self._start(found.group(1))
            return
        if found := ENDED.search(line):
            self._end(found.group(1))
            return
        parsed = LOG_LINE.match(line)
        if parsed is None:
            return
        level, message = parsed.groups()
        if "Task instance state updated" in line and (state := NEW_STATE.search(line)):
            if self.current is not None:
                self.states[self.current] = state.group(1)
            return
        if level in ("error", "critical"):
            self.say(self.current, f"error: {_cut(message)}")
            return
        self._message(message)

    def _start(self, task: str) -> None:
        self.current = task
        if task in self.started:
            return  # a deferred task resumes: same task, not a new step
        self.started[task] = self.clock()
        self.say(task, f"started (task {len(self.started)}/{len(self.tasks)})")

    def _end(self, task: str) -> None:
        seconds = self.clock() - self.started.get(task, self.clock())
        self.say(task, f"{self.states.get(task, 'finished')} after {seconds:.0f} s")
        self.current = None

    def _message(self, message: str) -> None:
        task = self.current
        show = SHOW.get(task or "")
        if show is None:
            return
        pod = POD_LINE.match(message)
        text = pod.group(2) if pod else message
        if task == "train" and (epoch := EPOCH.match(text)):
            text = _epoch(int(epoch.group(1)), epoch.group(2))
        if not text or not show.search(text) or HIDE.search(text):
            return
        key = f"{task}:{text}"
        if key in self.seen:  # a trigger re-run after a deferral repeats the lines it already showed
            return
        self.seen.add(key)
        self.say(task, _cut(text))


def _epoch(step: int, values: str) -> str:
    """``epoch 25: val_loss=0.3123, val_accuracy=0.93`` for every ``EPOCH_EVERY``-th epoch, else empty."""
    if step % EPOCH_EVERY:
        return ""
    return f"epoch {step}: " + ", ".join(_short(pair) for pair in values.split(", "))


def _short(pair: str) -> str:
    """``name=value`` with a number to 4 significant digits."""
    name, _, value = pair.partition("=")
    try:
        return f"{name}={float(value):.4g}"
    except ValueError:
        return pair


def _cut(text: str, limit: int = 220) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
