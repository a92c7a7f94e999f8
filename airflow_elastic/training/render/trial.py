"""A training group as one trial of a sweep (pure): its parameters in the pods, in its strings, its own checkpoints.

:func:`trial_group` returns a :class:`TrialGroup`, a ``TrainingGroup`` that also carries the trial's parameters;
the renderer puts them in every training container as ``AE_TRIAL_PARAMS`` (JSON, read by
``runtime.context().trial_params``). References ``{{ trial.params.lr }}``, ``{{ trial.params['my-name'] }}``,
``{{ trial.number }}`` and ``{{ trial.sweep }}`` in ``command``, ``args``, ``env`` values and ``image`` are replaced
by a small substitution (no Jinja: the pure layer stays cheap to import), leaving any other Jinja (``{{ ds }}``)
for Airflow. Apply it before Airflow renders the group: ``trial`` is not in Airflow's template context. Each trial
checkpoints under its own :func:`trial_checkpoint_uri`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from airflow_elastic.kube.labels import SWEEP_LABEL, TRIAL_LABEL
from airflow_elastic.training.spec import SpecError, TrainingGroup
from airflow_elastic.training.templating import render_group
from airflow_elastic.training.validation import is_label_value

__all__ = [
    "SWEEP_LABEL",
    "TRIAL_LABEL",
    "TrialGroup",
    "params_digest",
    "trial_checkpoint_uri",
    "trial_env_value",
    "trial_group",
    "trial_labels",
]

_REFERENCE = re.compile(
    r"\{\{-?\s*trial\.(?:params\.(?P<dotted>[A-Za-z_]\w*)|params\[\s*(?P<q>['\"])(?P<quoted>.*?)(?P=q)\s*\]"
    r"|(?P<attr>number|sweep))\s*-?\}\}"
)


@dataclass(frozen=True)
class TrialGroup(TrainingGroup):
    """A :class:`TrainingGroup` run as trial ``trial_number`` of sweep ``sweep`` with ``trial_params``."""

    trial_params: Mapping[str, Any] = field(default_factory=dict)
    trial_number: int = 0
    sweep: str = ""

    _dicts = ("env", "pod_overrides", "trial_params")


def trial_env_value(group: TrainingGroup) -> str | None:
    """``AE_TRIAL_PARAMS`` for ``group``'s pods: its trial parameters as JSON, or None for a plain group."""
    if not isinstance(group, TrialGroup):
        return None
    return json.dumps(dict(group.trial_params), sort_keys=True, separators=(",", ":"))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _substitute(params: Mapping[str, Any], number: int, sweep: str) -> Any:
    def one(match: re.Match[str]) -> str:
        attr = match.group("attr")
        if attr is not None:
            return str(number) if attr == "number" else sweep
        name = match.group("dotted") or match.group("quoted")
        if name not in params:
            raise SpecError([("trial.params", f"{match.group(0)!r} names no parameter; known: {sorted(params)}")])
        return _text(params[name])

    return lambda text: _REFERENCE.sub(one, text)


def trial_group(group: TrainingGroup, params: Mapping[str, Any], *, number: int, sweep: str) -> TrialGroup:
    """``group`` as trial ``number`` of ``sweep`` with ``params``.

    The copy carries ``params`` (rendered as ``AE_TRIAL_PARAMS`` in every training container), has the
    ``{{ trial.* }}`` references in its strings replaced (strings as they are, other values as JSON: ``0.001``,
    ``true``), and checkpoints under :func:`trial_checkpoint_uri` so trials never resume from each other.

    Raises:
        SpecError: ``params`` is not a JSON object, a reference names no parameter, or a substituted value breaks
            a rule of the group (naming the field).
    """
    if not isinstance(params, Mapping):
        raise SpecError([("trial_params", f"must be a dict of parameters, got {params!r:.200}")])
    try:
        json.dumps(dict(params), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise SpecError([("trial_params", f"must be a JSON object of parameters: {error}")]) from None
    base = {f.name: getattr(group, f.name) for f in fields(TrainingGroup)}
    rendered = render_group(TrainingGroup(**base), _substitute(params, number, sweep))
    checkpoint = rendered.checkpoint
    if checkpoint is not None:
        checkpoint = replace(checkpoint, uri=trial_checkpoint_uri(checkpoint.uri, sweep, number, params))
    fields_of = {f.name: getattr(rendered, f.name) for f in fields(TrainingGroup)}
    return TrialGroup(
        **{**fields_of, "checkpoint": checkpoint}, trial_params=dict(params), trial_number=number, sweep=sweep
    )


def params_digest(params: Mapping[str, Any]) -> str:
    """8 hex characters of a hash of ``params`` (key order aside): the same parameters, the same digest."""
    text = json.dumps(dict(params), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def trial_checkpoint_uri(uri: str, sweep: str, number: int, params: Mapping[str, Any]) -> str:
    """Where trial ``number`` of ``sweep`` with ``params`` checkpoints: ``<uri>/<sweep>/trial-<n>-<params digest>``.

    The sweep (a new one per generation of a sweep task, the task id for mapped trials) and the parameters are in
    the path, so no trial can resume a checkpoint of another trial, another sweep, or other parameters (a state
    dict of another shape, another model's loss)."""
    return "/".join(part for part in (uri.rstrip("/"), sweep, f"trial-{number}-{params_digest(params)}") if part)


def trial_labels(sweep: str, number: int) -> dict[str, str]:
    """The labels of a sweep's trial JobSets and pods (``kubectl get jobsets -l airflow-elastic.io/sweep=<sweep>``).

    Raises:
        SpecError: ``sweep`` is not a valid label value (63 characters of ``[A-Za-z0-9._-]``, alphanumeric ends).
    """
    if not is_label_value(sweep) or not sweep:
        raise SpecError([("sweep", f"{sweep!r} must be a Kubernetes label value (63 characters, [A-Za-z0-9._-])")])
    return {SWEEP_LABEL: sweep, TRIAL_LABEL: str(number)}
