"""A sweep's report: ``sweep.csv``, ``sweep.json`` and ``sweep.png`` under a URI (pure; matplotlib when called).

The PNG (matplotlib's Agg canvas, no display, no pyplot state) has two panels: the objective of every trial with
the best-so-far line, and every trial's intermediate curve, pruned trials dashed and marked with an ``x`` where
they were stopped. Files are written through a ``checkpoints.Storage`` (a local path, or any fsspec filesystem:
the operator passes the one ``operators.checkpoint_storage`` resolves, with the connection's credentials).
"""

from __future__ import annotations

import csv
import io
import json
import math

from airflow_elastic.contract import checkpoints
from airflow_elastic.sweeps.history import SweepHistory, better, check_mode

__all__ = ["FILES", "render_csv", "render_json", "render_png", "report_paths", "write_report"]

FILES = {"csv": "sweep.csv", "json": "sweep.json", "png": "sweep.png"}
_COLUMNS = ("number", "state", "value", "cause", "jobset", "gpu_hours", "preemptions", "steps", "last_step")


def render_csv(history: SweepHistory) -> bytes:
    """One row per trial: the trial's fields, then one ``param.<name>`` column per parameter."""
    names = sorted({name for t in history.trials for name in t.params})
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*_COLUMNS, "started_at", "finished_at", *(f"param.{n}" for n in names)])
    for t in history.trials:
        params = [
            json.dumps(t.params[n]) if not isinstance(t.params.get(n, ""), str) else t.params.get(n, "") for n in names
        ]
        row = [
            t.number,
            t.state,
            "" if t.value is None else t.value,
            t.cause,
            t.jobset,
            t.gpu_hours,
            t.preemptions,
            len(t.intermediate),
            "" if t.last_step is None else t.last_step,
        ]
        writer.writerow([*row, t.started_at or "", t.finished_at or "", *params])
    return out.getvalue().encode()


def render_json(history: SweepHistory, *, objective: str, mode: str) -> bytes:
    """The whole history plus the objective, mode and best trial."""
    best = history.best(mode)
    doc = {
        "objective": objective,
        "mode": mode,
        "best_trial": best.number if best else None,
        "best_value": best.value if best else None,
        "best_params": best.params if best else None,
        **history.to_json(),
    }
    return json.dumps(doc, indent=1, sort_keys=True).encode()


def render_png(history: SweepHistory, *, objective: str, mode: str) -> bytes:
    """The two-panel figure as PNG bytes (see the module docstring)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(11, 4.2), dpi=100)
    FigureCanvasAgg(figure)
    left, right = figure.subplots(1, 2)
    colours = {"complete": "tab:blue", "pruned": "tab:orange", "failed": "tab:red", "stopped": "tab:gray"}
    best: float | None = None
    steps: list[tuple[int, float]] = []
    for t in history.trials:
        value = t.value if t.value is not None and math.isfinite(t.value) else None
        if value is not None and t.state != "running":
            left.scatter([t.number], [value], color=colours.get(t.state, "black"), s=22, zorder=3)
        if t.state == "complete" and value is not None and (best is None or better(value, best, mode)):
            best = value
        if best is not None:
            steps.append((t.number, best))
    if steps:
        left.step(*zip(*steps, strict=True), where="post", color="tab:green", label=f"best so far ({mode})")
    for state in sorted({t.state for t in history.finished()}, key=list(colours).index):
        left.scatter([], [], color=colours[state], s=22, label=state)
    if left.get_legend_handles_labels()[0]:
        left.legend(loc="best", fontsize="small")
    left.set(title=f"{objective} per trial", xlabel="trial", ylabel=objective)
    for t in history.trials:
        if not t.intermediate:
            continue
        xs, ys = zip(*sorted(t.intermediate.items()), strict=True)
        pruned = t.state == "pruned"
        style = {"linestyle": "--" if pruned else "-", "marker": ".", "markersize": 3, "linewidth": 1, "alpha": 0.8}
        right.plot(xs, ys, color=colours.get(t.state, "tab:purple"), **style)
        if pruned:
            right.plot([xs[-1]], [ys[-1]], marker="x", color="tab:orange", markersize=8)
    if any(t.state == "pruned" for t in history.trials):
        right.plot([], [], color="tab:orange", linestyle="--", marker="x", label="pruned")
        right.legend(loc="best", fontsize="small")
    for axes in (left, right):
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    right.set(title=f"intermediate {objective}", xlabel="step", ylabel=objective)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def write_report(
    history: SweepHistory,
    *,
    objective: str,
    mode: str,
    uri: str,
    conn_id: str | None = None,
    storage: checkpoints.Storage | None = None,
) -> dict[str, str]:
    """Write ``sweep.csv``, ``sweep.json`` and ``sweep.png`` under ``uri``.

    Args:
        history: the sweep's trials.
        objective, mode: what the sweep optimised.
        uri: a local path, ``file://`` or any fsspec URI (``s3://bucket/sweeps/run-1``).
        conn_id: an Airflow connection for ``uri``; resolving it needs Airflow, so pass ``storage`` as well (the
            operator's ``checkpoint_storage(Checkpointing(uri, conn_id=conn_id))``).
        storage: the filesystem to write through; default: local files or fsspec's own for the scheme.

    Returns:
        ``{"csv": ..., "json": ..., "png": ...}``: where each file is, as URIs like ``uri``.

    Raises:
        ValueError: ``conn_id`` without ``storage``, or a bad ``mode``.
    """
    check_mode(mode)
    if conn_id is not None and storage is None:
        raise ValueError(
            f"report URI {uri!r}: conn_id={conn_id!r} needs storage= (the filesystem that connection opens); "
            "the pure report module does not import Airflow"
        )
    fs, root = checkpoints._root(storage, uri)  # the checkpoint layout's "URI -> path in this filesystem"
    fs.makedirs(root, exist_ok=True)
    contents = {
        "csv": render_csv(history),
        "json": render_json(history, objective=objective, mode=mode),
        "png": render_png(history, objective=objective, mode=mode),
    }
    for kind, data in contents.items():
        fs.pipe_file(f"{root}/{FILES[kind]}", data)
    return report_paths(uri)


def report_paths(uri: str) -> dict[str, str]:
    """Where :func:`write_report` puts each file under ``uri``."""
    return {kind: f"{uri.rstrip('/')}/{name}" for kind, name in FILES.items()}
