"""The report of ``bench/goodput.py``: its tables (markdown) and its plot (matplotlib, Agg), from the measured rows."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

STRATEGIES = {
    "elastic": "1 airflow-elastic",
    "periodic": "2 periodic only",
    "handrolled": "3 hand-rolled retries",
    "ft": "4 fault-tolerant replica groups",
}


#: Figures averaged over a (strategy, MTBR) cell's seeds.
MEANS = ("goodput", "lost_steps", "restart_overhead", "gpu_hours", "lost_gpu_hours", "reclaims", "interruptions")
MEANS += ("tries_on_reclaims", "restart_wait", "restart_startup")
#: Strategy 4's own figures (``bench/scripts/goodput_figures.py``), averaged likewise; None ("—") elsewhere.
MEANS += ("survivor_restarts", "survivor_pause", "rejoin_pause", "heal_seconds", "replacements", "healed_from_peer")


def cells(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (MTBR, strategy), in first-seen order: figures averaged over its seeds (``None`` ignored),
    ``seeds`` and ``goodput_range`` (min, max) added, ``succeeded`` only if every run did."""
    groups: dict[tuple[float, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["mtbr_intervals"], row["strategy"]), []).append(row)
    out = []
    for runs in groups.values():
        cell = dict(runs[0], seeds=len(runs), succeeded=all(r["succeeded"] for r in runs))
        for key in MEANS:
            known = [r[key] for r in runs if r.get(key) is not None]
            cell[key] = statistics.fmean(known) if known else None
        goodputs = [r["goodput"] for r in runs if r.get("goodput") is not None]
        cell["goodput_range"] = (min(goodputs), max(goodputs)) if goodputs else None
        if not cell["succeeded"]:
            cell["state"] = ", ".join(sorted({str(r["state"]) for r in runs if not r["succeeded"]}))
        out.append(cell)
    return out


def table(rows: list[dict[str, Any]], references: list[dict[str, Any]] | None = None) -> str:
    """The main grid as markdown (means over seeds), with goodput ratios against strategy 3 at the same MTBR and,
    given the reference runs, against the same strategy's goodput without reclaims."""
    grid = cells(rows)
    several = any(c["seeds"] > 1 for c in grid)
    ceilings = {r["strategy"]: r.get("goodput") for r in references or []}
    lines = [
        "| MTBR (x interval) | strategy | succeeded | goodput | x strategy 3 | lost steps "
        "| restart overhead (s) | GPU-h requested | GPU-h lost | reclaims | interruptions "
        "| Airflow tries on reclaims | survivor restarts | survivors' pause (s) | replacement heal (s) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines[0] = _split_header(lines[0], rows)
    if several:
        lines[0] = lines[0].replace("| succeeded | goodput |", "| seeds | succeeded | goodput (range) |")
        lines[1] += " --- |"
    if ceilings:
        lines[0] = lines[0].replace("| x strategy 3 |", "| x strategy 3 | x no reclaim |")
        lines[1] += " --- |"
    for cell in grid:
        same = [c for c in grid if c["strategy"] == "handrolled" and c["mtbr_intervals"] == cell["mtbr_intervals"]]
        base = same[0] if same else {}
        ratio = cell.get("goodput") / base["goodput"] if cell.get("goodput") and base.get("goodput") else None
        ceiling = ceilings.get(cell["strategy"])
        of_ceiling = cell["goodput"] / ceiling if cell.get("goodput") and ceiling else None
        goodput = _num(cell.get("goodput"), ".2f")
        if several and cell["goodput_range"]:
            goodput += " ({:.2f}-{:.2f})".format(*cell["goodput_range"])
        row = [
            f"{cell['mtbr_intervals']:g}",
            STRATEGIES[cell["strategy"]],
            *([str(cell["seeds"])] if several else []),
            "yes" if cell["succeeded"] else f"no ({cell['state']})",
            goodput,
            _num(ratio, ".2f"),
            *([_num(of_ceiling, ".2f")] if ceilings else []),
            _num(cell.get("lost_steps"), ".0f"),
            _overhead(cell),
            _num(cell.get("gpu_hours"), ".4f"),
            _num(cell.get("lost_gpu_hours"), ".4f"),
            _num(cell.get("reclaims"), ".3g"),
            _num(cell.get("interruptions"), ".3g"),
            _num(cell.get("tries_on_reclaims"), ".3g"),
            *ft_cells(cell),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def reference_table(references: list[dict[str, Any]]) -> str:
    """Each strategy's reference run, without reclaims: the most its goodput reaches on this machine, what the
    checkpoint writes and the steps slower than the median (the definition's step time) cost with nothing lost."""
    lines = [
        "| strategy, no reclaim | succeeded | goodput | by wall time | step time (s) | pod-seconds |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in references:
        cells_ = [
            STRATEGIES[row["strategy"]],
            "yes" if row["succeeded"] else f"no ({row['state']})",
            _num(row.get("goodput"), ".3f"),
            _num(row.get("time_goodput"), ".3f"),
            _num(row.get("step_seconds"), ".4f"),
            _num(row.get("pod_seconds"), ".1f"),
        ]
        lines.append("| " + " | ".join(cells_) + " |")
    return "\n".join(lines)


def ft_cells(row: dict[str, Any]) -> list[str]:
    """Survivor restarts, survivors' pause per reclaim and replacement heal time (with how many replacements
    healed from a live peer); "—" where they do not apply (strategies 1-3) or nothing was measured."""
    heal = _num(row.get("heal_seconds"), ".1f")
    if row.get("heal_seconds") is not None and row.get("replacements"):
        heal += f" ({row['healed_from_peer']:.3g}/{row['replacements']:.3g} from a peer)"
    return [_num(row.get("survivor_restarts"), ".3g"), _num(row.get("survivor_pause"), ".1f"), heal]


def runs_table(rows: list[dict[str, Any]]) -> str:
    """Every run of the grid, one line each."""
    lines = [
        "| seed | MTBR (x interval) | strategy | succeeded | goodput | lost steps "
        "| restart overhead (s) | reclaims | interruptions | Airflow tries on reclaims | survivor restarts "
        "| survivors' pause (s) | replacement heal (s) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines[0] = _split_header(lines[0], rows)
    for row in sorted(rows, key=lambda r: (r["seed"], r["mtbr_intervals"], list(STRATEGIES).index(r["strategy"]))):
        cells_ = [
            str(row["seed"]),
            f"{row['mtbr_intervals']:g}",
            STRATEGIES[row["strategy"]],
            "yes" if row["succeeded"] else f"no ({row['state']})",
            _num(row.get("goodput"), ".2f"),
            _num(row.get("lost_steps"), "d"),
            _overhead(row),
            str(row["reclaims"]),
            _num(row.get("interruptions"), "d"),
            str(row["tries_on_reclaims"]),
            *ft_cells(row),
        ]
        lines.append("| " + " | ".join(cells_) + " |")
    return "\n".join(lines)


def _split_header(header: str, rows: list[dict[str, Any]]) -> str:
    """Name the restart overhead's parts in ``header`` when some row has them (rows saved before the split do not)."""
    if any(r.get("restart_wait") is not None for r in rows):
        return header.replace("| restart overhead (s) |", "| restart overhead (s): wait + start-up |")
    return header


def _overhead(row: dict[str, Any]) -> str:
    """The median restart overhead, and its parts' medians when measured: the wait until the group's last process
    started, then that process's start-up to the first step (``bench/goodput.py``)."""
    total = _num(row.get("restart_overhead"), ".1f")
    if row.get("restart_overhead") is None or row.get("restart_wait") is None or row.get("restart_startup") is None:
        return total
    return f"{total}: {row['restart_wait']:.1f} + {row['restart_startup']:.1f}"


def intervals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sweep per checkpoint interval, shortest first: goodput's mean and (min, max) over its seeds' runs, the
    median of the operator's advice, and ``seeds``."""
    out = []
    for interval in sorted({r["interval_seconds"] for r in rows}):
        runs = [r for r in rows if r["interval_seconds"] == interval]
        goodputs = [r["goodput"] for r in runs if r.get("goodput") is not None]
        advice = [r["advice_seconds"] for r in runs if r.get("advice_seconds")]
        out.append(
            {
                "interval_seconds": interval,
                "seeds": len(runs),
                "goodput": statistics.fmean(goodputs) if goodputs else None,
                "goodput_range": (min(goodputs), max(goodputs)) if goodputs else None,
                "advice_seconds": statistics.median(advice) if advice else None,
            }
        )
    return out


def sweep_table(rows: list[dict[str, Any]]) -> str:
    """The sweep as markdown: per interval, goodput (the mean and range of several seeds) and the advice."""
    points = intervals(rows)
    several = any(r["seeds"] > 1 for r in points)
    head = "| checkpoint interval (s) | goodput | operator's advice (s) |"
    lines = [head.replace("| goodput |", "| seeds | goodput (range) |") if several else head]
    lines.append("| --- | --- | --- | --- |" if several else "| --- | --- | --- |")
    for point in points:
        goodput = _num(point["goodput"], ".2f")
        if several and point["goodput_range"]:
            goodput += " ({:.2f}-{:.2f})".format(*point["goodput_range"])
        seeds = [str(point["seeds"])] if several else []
        cells = [f"{point['interval_seconds']:g}", *seeds, goodput, _num(point["advice_seconds"], "g")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fitted_optimum(rows: list[dict[str, Any]]) -> float | None:
    """The interval where ``goodput = c - a/T - b·T`` (checkpoint cost ~ 1/T, rework ~ T), fitted by least squares
    to the measured points, peaks: ``sqrt(a/b)``; None with fewer than three intervals or a fit without a peak."""
    import numpy

    points = [(r["interval_seconds"], r["goodput"]) for r in rows if r.get("goodput")]
    if len({t for t, _ in points}) < 3:
        return None
    t, g = numpy.array(points, dtype=float).T
    (_, minus_a, minus_b), *_ = numpy.linalg.lstsq(numpy.column_stack([numpy.ones_like(t), 1 / t, t]), g, rcond=None)
    return float(numpy.sqrt(minus_a / minus_b)) if minus_a < 0 and minus_b < 0 else None


def young_daly(rows: list[dict[str, Any]]) -> str:
    """The advice against the measured optimum. With several seeds, per seed first: each schedule has its own
    reclaims, so its own optimum and its own advice (the advice reads the reclaims it observed); then pooled."""
    seeds = sorted({r.get("seed") for r in rows}, key=str)
    if len(seeds) <= 1:
        return _young_daly(rows)
    lines = [_young_daly([r for r in rows if r.get("seed") == seed], f", seed {seed}") for seed in seeds]
    return "\n\n".join([*lines, _young_daly(rows, ", all seeds pooled")])


def _young_daly(rows: list[dict[str, Any]], which: str = "") -> str:
    measured = [r for r in rows if r.get("goodput")]
    advice = [r["advice_seconds"] for r in rows if r.get("advice_seconds")]
    if not measured or not advice:
        return f"Young/Daly{which}: no measured goodput or no advice in the task logs"
    best = max((p for p in intervals(measured) if p["goodput"]), key=lambda p: p["goodput"])["interval_seconds"]
    fitted = fitted_optimum(measured)  # every run a point: seeds weigh alike
    optimum = fitted if fitted is not None else best
    how = f"the peak of the fit, {fitted:.1f} s; best point {best:g} s" if fitted is not None else "best point"
    advised = statistics.median(advice)
    off = (advised - optimum) / optimum
    return (
        f"Young/Daly{which}: measured optimum {optimum:.1f} s ({how}), the operator advises {advised:g} s (median of "
        f"its runs): {off:+.0%} of the optimum ({'within' if abs(off) <= 0.3 else 'outside'} ±30 %)"
    )


def _num(value: Any, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def _ticks(axes: Any, values: list[float]) -> None:
    """A log-2 axis labelled with the measured values themselves."""
    axes.set_xscale("log", base=2)
    axes.set_xticks(sorted(set(values)), [f"{v:g}" for v in sorted(set(values))])
    axes.minorticks_off()


def _means(axes: Any, x_key: str, points: list[dict[str, Any]], label: str, shift: float = 1.0) -> None:
    """Mean goodput against ``x_key``, with bars to the min and max of its seeds (``goodput_range``); ``shift``
    multiplies x (on the log axis: a small offset that keeps strategies at one MTBR apart)."""
    x = [p[x_key] * shift for p in points]
    y = [p.get("goodput") or 0.0 for p in points]
    spread = [p["goodput_range"] or (y[i], y[i]) for i, p in enumerate(points)]
    error = [[y[i] - lo for i, (lo, _) in enumerate(spread)], [hi - y[i] for i, (_, hi) in enumerate(spread)]]
    axes.errorbar(x, y, yerr=error, marker="o", capsize=3, label=label)


def plot(rows: list[dict[str, Any]], sweep: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    if sweep:
        figure, (left, right) = pyplot.subplots(1, 2, figsize=(11, 4.2))
    else:  # a grid without a sweep: no empty Young/Daly panel
        figure, left = pyplot.subplots(1, 1, figsize=(6.5, 4.2))
    grid = cells(rows)
    for i, (strategy, label) in enumerate(STRATEGIES.items()):
        mine = sorted((c for c in grid if c["strategy"] == strategy), key=lambda c: c["mtbr_intervals"])
        if not mine:
            continue
        _means(left, "mtbr_intervals", mine, label, shift=2 ** (0.04 * (i - (len(STRATEGIES) - 1) / 2)))
    left.set(xlabel="mean time between reclaims (checkpoint intervals)", ylabel="goodput", ylim=(0, 1.05))
    _ticks(left, [r["mtbr_intervals"] for r in rows])
    fewest, most = min((c["seeds"] for c in grid), default=1), max((c["seeds"] for c in grid), default=1)
    seeds = f"{most}" if fewest == most else f"{fewest}-{most}"
    left.set_title("goodput under spot reclaims" + (f" (mean and range of {seeds} seeds)" if most > 1 else ""))
    left.legend()
    if sweep:
        _means(right, "interval_seconds", intervals(sweep), "measured (strategy 2)")
        fitted = fitted_optimum(sweep)
        if fitted is not None:
            right.axvline(fitted, color="tab:green", linestyle=":", label="measured optimum (fit)")
        advice = [r["advice_seconds"] for r in sweep if r.get("advice_seconds")]
        if advice:
            right.axvline(statistics.median(advice), color="tab:red", linestyle="--", label="operator's advice")
        _ticks(right, [r["interval_seconds"] for r in sweep])
        right.legend()
        right.set(xlabel="checkpoint interval (s)", ylabel="goodput", ylim=(0, 1.05))
        right.set_title("Young/Daly check")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
