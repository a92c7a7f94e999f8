"""``operators.reruns``: a retry is told from a clear by what Airflow changes on a clear (``max_tries``, the DAG
run's ``clear_number``) and leaves alone on a retry."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_elastic.operators.reruns import TryMark, is_retry, keep, kept_result


def context(try_number: int, max_tries: int | None, clear_number: int | None = 0) -> dict[str, object]:
    ti = SimpleNamespace(try_number=try_number, max_tries=max_tries)
    return {"ti": ti, "dag_run": SimpleNamespace(clear_number=clear_number)}


FINISHED = TryMark.of(context(1, 2)).record()  # try 1 of a task with retries=2 finished the work


@pytest.mark.parametrize(
    ("now", "retry"),
    [
        (context(2, 2), True),  # a retry: Airflow leaves max_tries and the run's clear_number alone
        (context(3, 2), True),
        (context(2, 3), False),  # cleared: max_tries = try_number + retries
        (context(2, 2, 1), False),  # the run was cleared (e.g. retries lowered so that max_tries came out the same)
        (context(2, None), False),  # no max_tries from Airflow: unknown, run afresh
    ],
)
def test_a_retry_is_a_try_with_the_finishing_tries_max_tries_and_clear_number(now, retry):
    assert is_retry(FINISHED, TryMark.of(now)) is retry


def test_no_mark_or_a_garbled_one_is_not_a_retry():
    now = TryMark.of(context(2, 2))
    assert not is_retry(None, now) and not is_retry({"max_tries": 2}, now) and not is_retry("1", now)
    assert is_retry(TryMark.from_record(FINISHED), now)


def test_a_context_without_a_dag_run_or_clear_number_still_marks():
    mark = TryMark.of({"ti": SimpleNamespace(try_number=1, max_tries=0)})
    assert mark == TryMark(1, 0, None) and is_retry(
        mark.record(), TryMark.of({"ti": SimpleNamespace(try_number=2, max_tries=0)})
    )


def test_a_kept_result_is_returned_to_a_retry_only():
    record = {"name": "job-1", **keep({"metrics": {"rows": 3}}, context(1, 1))}
    assert kept_result(record, context(2, 1)) == {"metrics": {"rows": 3}}
    assert kept_result(record, context(2, 2)) is None  # cleared
    assert kept_result({"name": "job-1"}, context(2, 1)) is None and kept_result(None, context(2, 1)) is None
