"""The shared observer of a namespace, against the session's local cluster."""

from __future__ import annotations

from airflow_elastic.triggers.observer import JobSetObserver

SLEEP = "import time; time.sleep({})"


def observer_of(namespace: str) -> JobSetObserver | None:
    return next((o for o in JobSetObserver.registry.values() if o.namespace == namespace), None)
