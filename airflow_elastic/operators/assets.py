"""Attach what an operator produced to the asset events of its outlets (docs/concepts/assets.md).

A task that succeeds emits one event per ``Asset`` among its ``outlets``; before it returns, an operator that knows
what it produced (a stage's Job and metrics, the URL a model is served at) adds that to those events' ``extra``
through ``context["outlet_events"]``, beside whatever the DAG's author put there. Aliases are left alone: which
asset an alias resolves to is the DAG's decision. Annotating never fails a task.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def annotate(outlets: Iterable[Any], context: Mapping[str, Any], extra: Mapping[str, Any], log: Any) -> int:
    """Merge ``extra`` into the event extra of each ``Asset`` in ``outlets``; returns how many were annotated.

    Keys the DAG's author already set on an event are kept: the author's word wins over the operator's.
    """
    try:
        from airflow.sdk import Asset

        events = context["outlet_events"]
        assets = [outlet for outlet in outlets if isinstance(outlet, Asset)]
        for asset in assets:
            accessor = events[asset]
            accessor.extra = {**extra, **accessor.extra}
    except Exception as error:  # an event without the operator's extra still tells that the asset changed
        log.warning("Asset events not annotated: %s", error)
        return 0
    return len(assets)
