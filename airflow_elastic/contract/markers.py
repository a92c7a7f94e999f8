"""The intermediate-value line a trial prints and the sweep reads from the leader's log (standard library only).

``AE_INTERMEDIATE {"step": 3, "metrics": {"val_loss": 0.41}}``: one line on stdout, like the lines Katib's stdout
metrics collector parses. Stdout because it reaches the sweep through the pod log API, which the RBAC in
``docker/`` already grants (``pods/log: get``), with no metrics server, sidecar or database, and it survives a
container restart in the log the kubelet keeps. The runtime writes it (``runtime.report_intermediate``), the sweep
parses it (:func:`parse`); this module is the one place the format lives. A person reading the task log sees a
progress line instead (:func:`progress`: ``step 3: val_loss=0.41``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["MARKER", "RESULT_MARKER", "format_line", "format_result", "parse", "parse_result", "progress"]

MARKER = "AE_INTERMEDIATE"
_DECODER = json.JSONDecoder()


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def format_line(step: int, metrics: Mapping[str, float]) -> str:
    """The marked line for ``metrics`` at ``step`` (no newline).

    Raises:
        ValueError: ``step`` is not an integer >= 0, or ``metrics`` is empty, has a name that is not a non-empty
            string or a value that is not a finite number.
    """
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"step must be an integer >= 0, got {step!r}")
    if not isinstance(metrics, Mapping) or not metrics:
        raise ValueError(f"metrics must be a non-empty mapping of name to number, got {metrics!r}")
    for name, value in metrics.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"metric names must be non-empty strings, got {name!r}")
        if not _is_number(value) or not math.isfinite(value):
            raise ValueError(f"metric {name!r} must be a finite number, got {value!r}")
    payload = {"step": step, "metrics": {k: float(v) for k, v in metrics.items()}}
    return f"{MARKER} {json.dumps(payload, separators=(', ', ': '))}"


def parse(line: str) -> tuple[int, dict[str, float]] | None:
    """``(step, metrics)`` from a log line holding a marker, or None for any other or malformed line.

    Text before the marker (a kubelet timestamp, a ``kubectl --prefix``) and after the JSON object is ignored.
    Never raises.
    """
    if not isinstance(line, str):
        return None
    at = line.find(MARKER + " ")
    if at < 0:
        return None
    try:
        payload, _ = _DECODER.raw_decode(line, at + len(MARKER) + 1)
    except ValueError:
        return None
    if not isinstance(payload, dict):
        return None
    step, metrics = payload.get("step"), payload.get("metrics")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0 or not isinstance(metrics, dict):
        return None
    if not metrics or not all(_is_number(v) and math.isfinite(v) for v in metrics.values()):
        return None
    return step, {str(k): float(v) for k, v in metrics.items()}


def progress(line: str) -> str:
    """``line`` as the task log shows it: a marker (and what follows it) becomes ``step 3: val_loss=0.41``; any other
    or malformed line is returned as it is."""
    if MARKER not in line or (parsed := parse(line)) is None:
        return line
    step, metrics = parsed
    values = ", ".join(f"{name}={value:.6g}" for name, value in metrics.items())
    return f"{line[: line.find(MARKER + ' ')]}step {step}: {values}"


# ------------------------------------------------------------------------------------------ a driver's final result

#: The line a Ray job's driver prints to report its result: ``AE_RESULT {"accuracy": 0.97}`` (a JSON object). The
#: driver's log reaches the task through the RayJob's submitter pod (``ray job logs --follow``), so this is how an
#: entrypoint reports what a training pod reports through its termination message. The last such line wins.
RESULT_MARKER = "AE_RESULT"


def format_result(result: Mapping[str, Any]) -> str:
    """The marked line reporting ``result`` (no newline).

    Raises:
        ValueError: ``result`` is not a mapping, or JSON cannot hold it (a NaN, an object).
    """
    if not isinstance(result, Mapping):
        raise ValueError(f"a result must be a mapping of name to JSON value, got {result!r}")
    try:
        return f"{RESULT_MARKER} {json.dumps(dict(result), allow_nan=False, sort_keys=True)}"
    except (TypeError, ValueError) as err:
        raise ValueError(f"a result must hold only JSON values: {err}") from None


def parse_result(line: str) -> dict[str, Any] | None:
    """The JSON object of a :data:`RESULT_MARKER` line (text before the marker, such as a pod prefix, ignored);
    ``None`` for any other or malformed line. Never raises."""
    if not isinstance(line, str):
        return None
    at = line.find(RESULT_MARKER + " ")
    if at < 0:
        return None
    try:
        payload, _ = _DECODER.raw_decode(line, at + len(RESULT_MARKER) + 1)
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None
