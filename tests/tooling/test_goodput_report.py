"""``bench/scripts/goodput_report.py``: the goodput tables, from measured rows (no run here)."""

from __future__ import annotations

from typing import Any

from bench.scripts.goodput_report import reference_table, table


def row(strategy: str, goodput: float, **more: Any) -> dict[str, Any]:
    """One run's figures, as ``bench/goodput.py`` records them (only what the tables read)."""
    return {
        "strategy": strategy,
        "seed": 15,
        "mtbr_intervals": 10.0,
        "succeeded": True,
        "state": "success",
        "goodput": goodput,
        "reclaims": 2,
        "tries_on_reclaims": 0,
        **more,
    }


def columns(text: str, label: str) -> dict[str, str]:
    """The header → value of the table line of strategy ``label``."""
    lines = text.splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    (line,) = [line for line in lines if f"| {label} |" in line]
    return dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True))


def test_each_strategy_is_set_against_its_own_run_without_reclaims():
    rows = [row("handrolled", 0.8), row("ft", 0.9)]
    references = [row("handrolled", 0.96, mtbr_intervals=None), row("ft", 0.94, mtbr_intervals=None)]

    ft = columns(table(rows, references), "4 fault-tolerant replica groups")
    assert ft["x strategy 3"] == "1.12" and ft["x no reclaim"] == "0.96"
    assert columns(table(rows, references), "3 hand-rolled retries")["x no reclaim"] == "0.83"
    assert "x no reclaim" not in table(rows)  # no reference runs: no column


def test_a_strategy_without_a_reference_run_shows_a_dash():
    rows = [row("handrolled", 0.8), row("ft", 0.9)]
    assert columns(table(rows, [row("ft", 0.94, mtbr_intervals=None)]), "3 hand-rolled retries")["x no reclaim"] == "—"


def test_the_reference_table_lists_each_run_without_reclaims():
    references = [
        row("ft", 0.9412, mtbr_intervals=None, time_goodput=0.97, step_seconds=0.1061, pod_seconds=281.27),
        row("elastic", None, mtbr_intervals=None, succeeded=False, state="failed"),
    ]
    text = reference_table(references)
    assert columns(text, "4 fault-tolerant replica groups") == {
        "strategy, no reclaim": "4 fault-tolerant replica groups",
        "succeeded": "yes",
        "goodput": "0.941",
        "by wall time": "0.970",
        "step time (s)": "0.1061",
        "pod-seconds": "281.3",
    }
    assert columns(text, "1 airflow-elastic")["succeeded"] == "no (failed)"


def test_a_replacement_that_first_stepped_after_the_last_step_is_no_replacement():
    """Seed 17 of docs/goodput-background.md: the last reclaim's replacement started a second before the group's last
    step and trained step 1 alone after it; it joined no quorum, so it healed from nothing."""
    from bench.scripts.goodput_figures import ft_figures

    def step(process: str, group: int, number: int, at: float, **more: Any) -> dict[str, Any]:
        return {"process": process, "replica_group": group, "step": number, "committed": True, "time": at, **more}

    records = [step("a", 0, n, 10.0 + n) for n in range(1, 11)]
    records += [step("healed", 1, 6, 16.5, healed=True), step("late", 1, 1, 22.0)]
    starts = [{"process": p, "replica_group": g, "began": t} for p, g, t in [("a", 0, 9.0), ("healed", 1, 14.0)]]
    starts.append({"process": "late", "replica_group": 1, "began": 19.5})
    figures = ft_figures(records, starts, [], [], 1.0, (10.0, 20.0))
    assert (figures["replacements"], figures["healed_from_peer"], figures["heal_seconds"]) == (1, 1, 2.5)
