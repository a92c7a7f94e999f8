"""The metrics the operators send (``airflow_elastic.metering``): pure mappings from a verdict to samples."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from airflow_elastic.metering.catalog import CATALOG, TASK_TAGS, Sample, markdown_table, sample
from airflow_elastic.metering.groups import goodput, group_samples
from airflow_elastic.metering.stages import stage_samples
from airflow_elastic.metering.sweeps import sweep_finished, trial_ended, trial_started
from airflow_elastic.preemption import attempts
from airflow_elastic.stages.cron import StageEvent
from airflow_elastic.sweeps.history import SweepHistory, Trial
from airflow_elastic.training.state import GroupEvent
from tests.support.paths import ROOT

PREEMPTED = {"attempt": 0, "pod": "w", "cause": "spot_reclaim", "budget": "preemption"}


def values(samples: list[Sample]) -> dict[str, tuple[str, float, dict[str, str]]]:
    """name -> (kind, value, tags); a name appears once per call."""
    found = {s.name.removeprefix("airflow_elastic."): (s.kind, s.value, dict(s.tags)) for s in samples}
    assert len(found) == len(samples), samples
    return found


def decided(event: GroupEvent, history: attempts.History, *, started: float, now: float) -> dict:
    return attempts.decide(event, history, max_preemptions=3, started=started, gpus=2, now=now).attempt


# ------------------------------------------------------------------------------------------------ training groups


def test_a_reclaim_absorbed_in_the_cluster_is_counted_absorbed_and_a_restart():
    # One free restart (the JobSet restarted the group for a reclaim), and one pod the cluster replaced in place.
    event = GroupEvent("succeeded", "g", "ml", restarts=1, absorbed=({"cause": "spot_reclaim"},), spot_share=0.5)
    history = attempts.History(started=990.0, attempts=[decided(event, attempts.History(), started=1000.0, now=1900.0)])
    result = {**attempts.summary(history), "attempts": history.attempts, "restarts": 1}
    got = values(group_samples(result, outcome="succeeded", now=1900.0))
    ok = {"outcome": "succeeded"}
    assert got["training.finished"] == ("counter", 1, ok)
    assert got["training.preemptions_absorbed"] == ("counter", 2, ok)
    assert got["training.restarts"] == ("counter", 1, ok)
    assert "training.preemptions_resubmitted" not in got and "training.failures" not in got  # zero: not sent
    assert got["training.gpu_hours"] == ("gauge", 0.5, ok)  # 2 GPUs x 900 s
    assert got["training.spot_share"] == ("gauge", 0.5, ok)
    assert got["training.time_to_verdict"] == ("timing", 900_000, ok)  # from the first submission, in ms
    assert got["training.goodput"] == ("gauge", 1.0, {})  # nothing resubmitted: no time lost the operator can see


def test_a_resubmission_counts_once_and_its_lost_work_lowers_goodput():
    history = attempts.History(started=0.0)
    reclaimed = GroupEvent("failed", "g-1", "ml", evidence=(PREEMPTED,), metrics={"step": 30})
    first = decided(reclaimed, history, started=0.0, now=50.0)
    assert (first["outcome"], first["preemptions"], first["preemptions_absorbed"]) == ("resubmit", 1, 0)
    checkpoint = SimpleNamespace(step=20, marker={"time": 40.0})  # written 10 s before the attempt ended
    first.update(attempts.lost_work(first, checkpoint, gpus=2))
    assert (first["lost_steps"], first["lost_seconds"], first["lost_gpu_hours"]) == (10, 10.0, round(20 / 3600, 6))
    history.add(first)
    history.add(decided(GroupEvent("succeeded", "g-2", "ml", uid="2"), history, started=55.0, now=100.0))
    result = {**attempts.summary(history), "attempts": history.attempts}
    got = values(group_samples(result, outcome="succeeded", now=100.0))
    assert got["training.preemptions_resubmitted"][1] == 1
    assert "training.preemptions_absorbed" not in got
    assert got["training.lost_steps"][1] == 10
    assert got["training.lost_gpu_hours"][1] == round(20 / 3600, 6)
    # 10 s past the checkpoint and 5 s between the attempts, of 100 s to the verdict.
    assert got["training.goodput"][1] == 0.85
    assert got["training.time_to_verdict"][1] == 100_000


def test_a_failed_task_reports_its_failures_and_no_goodput():
    event = GroupEvent("failed", "g", "ml", restarts=2, restarts_counted=2)
    history = attempts.History(started=0.0, attempts=[decided(event, attempts.History(), started=0.0, now=10.0)])
    summary = {**attempts.summary(history), "attempts": history.attempts}
    got = values(group_samples(summary, outcome="failed", now=12.0))
    bad = {"outcome": "failed"}
    assert got["training.finished"] == ("counter", 1, bad)
    assert got["training.failures"] == ("counter", 2, bad)
    assert got["training.restarts"] == ("counter", 2, bad)
    assert "training.goodput" not in got and "training.spot_share" not in got  # unknown share: not sent


def test_goodput_is_unknown_when_a_resubmitted_attempts_lost_time_is():
    runs = [
        {"outcome": "resubmit", "started": 0.0, "ended": 10.0, "lost_seconds": None},
        {"outcome": "succeeded", "started": 10.0, "ended": 20.0},
    ]
    assert goodput(runs, now=20.0) is None
    assert goodput([], now=20.0) is None
    assert goodput([{**runs[0], "lost_seconds": 30.0}, runs[1]], now=20.0) == 0.0  # never below 0


def test_an_earlier_releases_records_are_read_without_the_new_fields():
    old = [
        {"outcome": "resubmit", "preemptions": 2, "restart_causes": {"0": "spot_reclaim"}, "started": 0.0, "ended": 5},
        {"outcome": "succeeded", "preemptions": 0, "restart_causes": {}, "started": 5.0, "ended": 9.0},
    ]
    got = values(group_samples({"attempts": old}, outcome="succeeded", now=9.0))
    assert (got["training.preemptions_absorbed"][1], got["training.preemptions_resubmitted"][1]) == (1, 1)
    assert got["training.restarts"][1] == 1
    # A result without attempts (nothing judged): the in-cluster figures of the group itself.
    got = values(group_samples({"preemptions": 1, "restarts": 1}, outcome="succeeded", now=9.0))
    assert (got["training.preemptions_absorbed"][1], got["training.restarts"][1]) == (1, 1)
    assert "training.time_to_verdict" not in got


def test_an_unknown_outcome_is_refused():
    with pytest.raises(ValueError, match="outcome must be one of"):
        group_samples({}, outcome="maybe", now=0.0)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ sweeps


def test_a_sweep_reports_trials_by_state_and_its_best_value_as_it_goes():
    history = SweepHistory([Trial(1, {"lr": 0.1}, "running", started_at=0.0)])
    got = values(trial_started(history))
    assert got["sweep.trials"] == ("counter", 1, {"state": "running"})
    assert got["sweep.trials_running"] == ("gauge", 1, {})
    history.trials.append(Trial(2, {"lr": 0.2}, "running"))
    history.trials[0].state, history.trials[0].value = "pruned", 0.9
    got = values(trial_ended(history, 1, objective="val_loss", mode="min"))
    assert got["sweep.trials"] == ("counter", 1, {"state": "pruned"})
    assert got["sweep.trials_running"][1] == 1
    assert "sweep.best_value" not in got  # a pruned trial is no best
    history.trials[1].state, history.trials[1].value, history.trials[1].gpu_hours = "complete", 0.3, 0.25
    got = values(trial_ended(history, 2, objective="val_loss", mode="min"))
    assert got["sweep.best_value"] == ("gauge", 0.3, {"objective": "val_loss", "mode": "min"})
    assert got["sweep.trials_running"][1] == 0
    done = values(sweep_finished(history, outcome="succeeded", objective="val_loss", mode="min", started=10, now=70))
    assert done["sweep.finished"] == ("counter", 1, {"outcome": "succeeded"})
    assert done["sweep.gpu_hours"] == ("gauge", 0.25, {"outcome": "succeeded"})
    assert done["sweep.time_to_verdict"] == ("timing", 60_000, {"outcome": "succeeded"})
    assert done["sweep.best_value"][1] == 0.3


def test_a_failed_sweep_without_a_start_has_no_time_to_verdict():
    history = SweepHistory([Trial(1, {}, "failed", cause="boom")])
    got = values(sweep_finished(history, outcome="failed", objective="acc", mode="max", started=None, now=5.0))
    assert set(got) == {"sweep.finished", "sweep.gpu_hours"}


# ------------------------------------------------------------------------------------------------ stages


def test_a_stage_reports_its_outcome_failed_pods_and_duration():
    got = values(stage_samples(StageEvent("succeeded", "j", "ml", succeeded=2, failed=1, duration=12.5)))
    assert got == {
        "stage.finished": ("counter", 1, {"outcome": "succeeded"}),
        "stage.pods_failed": ("counter", 1, {"outcome": "succeeded"}),
        "stage.duration": ("timing", 12_500, {"outcome": "succeeded"}),
    }
    got = values(stage_samples(StageEvent("timeout", "j", "ml", duration=3.0)))
    assert got == {"stage.finished": ("counter", 1, {"outcome": "timeout"})}  # it did not run to an end


# ------------------------------------------------------------------------------------------------ the catalog


def test_a_sample_must_be_in_the_catalog_with_its_own_tags():
    with pytest.raises(KeyError):
        sample("airflow_elastic.training.nonsense", 1)
    with pytest.raises(ValueError, match="takes the tags"):
        sample("airflow_elastic.training.finished", 1)
    with pytest.raises(ValueError, match="whole number"):
        sample("airflow_elastic.training.failures", 0.5, outcome="failed")


def test_catalog_names_follow_airflows_conventions():
    names = [m.name for m in CATALOG]
    assert len(set(names)) == len(names)
    for m in CATALOG:
        # Dotted lowercase words, under the package's prefix; Airflow's validator allows [a-zA-Z0-9_.-] and 250
        # characters (with the statsd prefix); the tags never repeat the task's.
        assert m.name.startswith("airflow_elastic.") and m.name == m.name.lower(), m.name
        assert all(part and part.replace("_", "").isalnum() for part in m.name.split(".")), m.name
        assert not set(m.tags) & set(TASK_TAGS), m


def test_the_docs_list_every_metric_as_the_catalog_does():
    """The table of docs/concepts/metrics.md is the catalog's: a metric added, renamed, retagged or re-described in the
    code shows up here."""
    page = (ROOT / "docs/concepts/metrics.md").read_text()
    shown = re.search(r"<!-- metrics start -->\n(.*)<!-- metrics end -->", page, re.S)
    assert shown, "docs/concepts/metrics.md has no <!-- metrics start/end --> markers"
    assert shown.group(1) == markdown_table(), "the table must read:\n" + markdown_table()
