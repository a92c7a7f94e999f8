"""A Ray Tune experiment, read from its storage, as a sweep history (pure: imports neither Airflow nor kubernetes).

Ray Tune persists an experiment under ``<storage_path>/<name>/`` (Ray 2.60, ``ray/tune/execution/tune_controller.py``
``save_to_dir`` and ``ray/tune/experiment/trial.py`` ``get_json_state``/``get_runtime_state``):

* ``experiment_state-<timestamp>.json``: ``{"trial_data": [[<trial JSON>, <runtime JSON>], ...], ...}``, each
  element a JSON string; the trial JSON has ``trial_id``, ``config``, ``experiment_tag`` (``"<index>_<params>"``),
  ``status`` (``PENDING``, ``RUNNING``, ``PAUSED``, ``TERMINATED``, ``ERROR``) and ``relative_logdir``; the runtime JSON
  ``start_time``, ``last_result_time``, ``num_failures`` and ``error_filename``. A restored experiment writes a newer
  file; the newest is the state.
* per trial, ``<relative_logdir>/result.json``: one JSON object per ``tune.report`` (the metrics,
  ``training_iteration``, ``timestamp``, ``done``), and ``error.txt`` when the trial errored.

:func:`tune_history` turns that into the :class:`~airflow_elastic.sweeps.history.SweepHistory` the native sweep
operator keeps, so the same report (CSV, JSON, PNG) and result come out of either:

* the trial number is Tune's index plus one, its params the config, ``intermediate`` the objective per
  ``training_iteration``, ``value`` the last objective reported;
* ``ERROR`` is ``failed`` (cause: the last line of ``error.txt``); ``TERMINATED`` is ``complete``, or ``pruned`` when
  the trial stopped at fewer iterations than ``max_iterations`` (default: the most any terminated trial ran: an
  early-stopping scheduler such as ASHA stopped it); a trial still ``PENDING``/``RUNNING``/``PAUSED`` when the
  experiment ended is ``stopped``;
* ``preemptions`` are the times Tune restarted the trial: the reports where ``iterations_since_restore`` starts
  again at 1 (a trial restored from its checkpoint after its worker was lost, which Ray 2.60 does without counting
  a failure when the node was drained, as on a graceful spot reclaim), or Tune's ``num_failures`` when that says
  more (a restart that failed before reporting; an errored trial's last failure is not a restart). Tune cannot tell
  a lost node from a crash; the RayJob's pod evidence can.

:class:`TuneSweep` is what ``RayJobOperator(tune=...)`` reads once the RayJob succeeded: where the experiment is, what
it optimised, and where the report goes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_elastic.contract.checkpoints import Storage, storage_for
from airflow_elastic.sweeps.history import MODES, SweepHistory, Trial
from airflow_elastic.training.spec import SpecError

__all__ = ["TuneExperiment", "TuneSweep", "read_experiment", "tune_history"]

_STATE_PREFIX = "experiment_state-"
_UNFINISHED = ("PENDING", "RUNNING", "PAUSED")


@dataclass(frozen=True)
class TuneSweep:
    """A Ray Tune experiment a RayJob runs, read as a sweep once the RayJob succeeded.

    Args:
        experiment: ``<storage_path>/<name>`` of the Tune run (``tune.RunConfig(storage_path=..., name=...)``): a
            path the Airflow worker shares with the Ray pods, or a URI (``s3://``, ``gs://``, any fsspec scheme).
        objective: the metric the trials report and the sweep optimises (``tune.TuneConfig(metric=...)``).
        mode: ``min`` or ``max``.
        max_iterations: the iterations a trial runs when nothing stops it early (ASHA's ``max_t``); a terminated
            trial that ran fewer was pruned. Default: the most any terminated trial ran.
        report_uri: where ``sweep.csv``, ``sweep.json`` and ``sweep.png`` go; default ``<experiment>/report``.
        conn_id: an Airflow connection to read the experiment and write the report through (an object-storage
            provider's, as for checkpoints); ``None``: local files, or fsspec with the backend's own credentials.

    Raises:
        SpecError: a field is missing or of the wrong kind (named ``tune.<field>``).
    """

    experiment: str
    objective: str
    mode: str = "min"
    max_iterations: int | None = None
    report_uri: str | None = None
    conn_id: str | None = None

    def __post_init__(self) -> None:
        errors = []
        for name in ("experiment", "objective"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                errors.append((f"tune.{name}", f"must be a non-empty string, got {getattr(self, name)!r}"))
        if self.mode not in MODES:
            errors.append(("tune.mode", f"must be one of {MODES}, got {self.mode!r}"))
        bad_iterations = isinstance(self.max_iterations, bool) or not isinstance(self.max_iterations, (int, type(None)))
        if bad_iterations or (self.max_iterations is not None and self.max_iterations < 1):
            errors.append(("tune.max_iterations", f"must be an int >= 1 or None, got {self.max_iterations!r}"))
        for name in ("report_uri", "conn_id"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                errors.append((f"tune.{name}", f"must be a non-empty string or None, got {value!r}"))
        if errors:
            raise SpecError(errors)

    @property
    def report(self) -> str:
        """Where the report goes: ``report_uri``, else ``<experiment>/report``."""
        return self.report_uri or f"{self.experiment.rstrip('/')}/report"


@dataclass(frozen=True)
class TuneExperiment:
    """What :func:`read_experiment` found: the newest experiment state, and each trial's ``result.json`` rows and
    error text by the trial's ``relative_logdir``."""

    state: Mapping[str, Any]
    results: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)

    def trials(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """``(trial JSON, runtime JSON)`` of every trial, as the state lists them.

        Raises:
            ValueError: the state is not an experiment state (no ``trial_data`` list of pairs).
        """
        data = self.state.get("trial_data")
        if not isinstance(data, list):
            raise ValueError("not a Ray Tune experiment state: no 'trial_data' list")
        pairs = []
        for item in data:
            if not (isinstance(item, list) and len(item) == 2):
                raise ValueError(f"not a Ray Tune experiment state: trial_data holds {item!r:.100}")
            pairs.append(tuple(json.loads(part) if isinstance(part, str) else dict(part) for part in item))
        return pairs  # type: ignore[return-value]


def read_experiment(uri: str, storage: Storage | None = None) -> TuneExperiment:
    """Read the Tune experiment at ``uri`` (``<storage_path>/<name>``: a local path or any fsspec URI).

    Raises:
        FileNotFoundError: there is no ``experiment_state-*.json`` under ``uri`` (the entrypoint did not run Tune
            there, or ``storage_path``/``name`` differ).
        ValueError: a file is not what Tune writes.
    """
    fs, root = (storage, uri.rstrip("/")) if storage is not None else storage_for(uri)
    names = sorted(_basename(p) for p in fs.ls(root)) if fs.exists(root) else []
    states = [n for n in names if n.startswith(_STATE_PREFIX) and n.endswith(".json")]
    if not states:
        raise FileNotFoundError(f"{uri}: no Ray Tune experiment state ({_STATE_PREFIX}*.json) there")
    state = _json(fs, f"{root}/{states[-1]}")
    experiment = TuneExperiment(state)
    results: dict[str, list[dict[str, Any]]] = {}
    errors: dict[str, str] = {}
    for trial, runtime in experiment.trials():
        logdir = _logdir(trial)
        if not logdir:
            continue
        result_file = f"{root}/{logdir}/result.json"
        if fs.exists(result_file):
            lines = fs.cat_file(result_file).decode().splitlines()
            results[logdir] = [json.loads(line) for line in lines if line.strip()]
        error_name = runtime.get("error_filename")
        if error_name and fs.exists(f"{root}/{logdir}/{error_name}"):
            errors[logdir] = fs.cat_file(f"{root}/{logdir}/{error_name}").decode(errors="replace")
    return TuneExperiment(state, results, errors)


def tune_history(experiment: TuneExperiment, *, objective: str, max_iterations: int | None = None) -> SweepHistory:
    """The sweep history of ``experiment`` (see the module docstring for the mapping), trials in number order.

    Args:
        experiment: what :func:`read_experiment` read.
        objective: the metric the sweep optimises (a key of what the trials report).
        max_iterations: the iterations a trial runs when nothing stops it early (ASHA's ``max_t``); default: the
            most any terminated trial ran.
    """
    runs = [(t, r, experiment.results.get(_logdir(t), [])) for t, r in experiment.trials()]
    full = max_iterations
    if full is None:
        full = max((_iterations(rows) for t, _, rows in runs if t.get("status") == "TERMINATED"), default=0)
    trials = [_trial(t, r, rows, experiment.errors.get(_logdir(t), ""), objective, full) for t, r, rows in runs]
    return SweepHistory(sorted(trials, key=lambda trial: trial.number))


def _trial(
    trial: Mapping[str, Any],
    runtime: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    error: str,
    objective: str,
    full: int,
) -> Trial:
    status = str(trial.get("status") or "")
    intermediate = {
        int(row["training_iteration"]): float(row[objective])
        for row in rows
        if isinstance(row.get(objective), (int, float)) and "training_iteration" in row
    }
    value = intermediate[max(intermediate)] if intermediate else None
    iterations = _iterations(rows)
    failures, restarts = int(runtime.get("num_failures") or 0), _restarts(rows)
    cause = ""
    if status == "ERROR":
        state = "failed"
        failures -= 1  # the last failure ended it
        cause = _last_line(error) or "the trial errored (no error file)"
    elif status == "TERMINATED":
        state = "pruned" if iterations < full else "complete"
        if state == "pruned":
            cause = f"stopped early by the Tune scheduler after {iterations} of {full} iterations"
    elif status in _UNFINISHED:
        state, cause = "stopped", f"the experiment ended while the trial was {status}"
    else:
        raise ValueError(f"Ray Tune trial {trial.get('trial_id')!r}: unknown status {status!r}")
    return Trial(
        number=_number(trial),
        params=dict(trial.get("config") or {}),
        state=state,
        value=value,
        intermediate=intermediate,
        cause=cause,
        preemptions=max(failures, restarts, 0),
        started_at=_time(runtime.get("start_time")),
        finished_at=_time(runtime.get("last_result_time")) if state != "stopped" else None,
    )


def _logdir(trial: Mapping[str, Any]) -> str:
    return str(trial.get("relative_logdir") or "")


def _number(trial: Mapping[str, Any]) -> int:
    tag = str(trial.get("experiment_tag") or "")
    index = tag.split("_", 1)[0]
    if not index.isdigit():
        raise ValueError(
            f"Ray Tune trial {trial.get('trial_id')!r}: experiment_tag {tag!r} does not start with its index"
        )
    return int(index) + 1


def _restarts(rows: Sequence[Mapping[str, Any]]) -> int:
    """Reports after the first where ``iterations_since_restore`` is 1 again: the trial was started over (from its
    checkpoint, or from scratch without one)."""
    return sum(1 for row in rows[1:] if row.get("iterations_since_restore") == 1)


def _iterations(rows: Sequence[Mapping[str, Any]]) -> int:
    return max((int(row.get("training_iteration") or 0) for row in rows), default=0)


def _time(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _json(fs: Storage, path: str) -> dict[str, Any]:
    try:
        data = json.loads(fs.cat_file(path))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err})") from err
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a Ray Tune experiment state (a JSON object)")
    return data


def _basename(entry: Any) -> str:
    name = entry["name"] if isinstance(entry, Mapping) else str(entry)
    return name.rstrip("/").rsplit("/", 1)[-1]
