"""How long a wait rides out an API outage (``airflow_elastic.waiting.outage``): the pure accounting every wait
shares."""

from __future__ import annotations

import pytest

from airflow_elastic.waiting.outage import DEFAULT_API_OUTAGE_TOLERANCE, Outage


def test_an_outage_is_announced_once_tolerated_and_its_end_said():
    outage = Outage(tolerance=30.0, min_failures=3)
    notice, fatal = outage.failed(100.0, "list jobsets ml: 503 ServiceUnavailable: restarting")
    assert fatal == "" and notice == (
        "The Kubernetes API is failing (list jobsets ml: 503 ServiceUnavailable: restarting); waiting for it to come "
        "back for up to 30 s (api_outage_tolerance)"
    )
    assert outage.failed(110.0, "503") == ("", "")  # still within the tolerance: nothing more to say
    assert outage.recovered(125.0) == "The Kubernetes API answers again; the outage lasted 25 s"
    assert outage.recovered(126.0) == ""  # no outage, nothing to say


def test_the_tolerance_runs_out_only_after_enough_failed_looks():
    outage = Outage(tolerance=30.0, min_failures=3)
    outage.failed(0.0, "503")
    assert outage.failed(40.0, "503")[1] == ""  # 40 s, but a second look only (e.g. the triggerer was busy)
    assert outage.failed(41.0, "503")[1] == (
        "503 (the Kubernetes API has been failing for 41 s, longer than api_outage_tolerance=30 s)"
    )


def test_a_non_transient_error_ends_at_once_with_its_message():
    assert Outage().failed(0.0, "403 Forbidden: cannot list jobsets", transient=False) == (
        "",
        "403 Forbidden: cannot list jobsets",
    )


def test_the_default_rides_out_a_managed_control_plane_upgrade():
    assert DEFAULT_API_OUTAGE_TOLERANCE >= 300
    outage = Outage(min_failures=3)
    assert all(outage.failed(float(t), "503")[1] == "" for t in range(0, 300, 5))
    with pytest.raises(ValueError, match="api_outage_tolerance"):
        Outage(tolerance=-1)
