"""Recording core/v1 Events the way components do (repeats of the same event are counted, not duplicated)."""

from __future__ import annotations

import secrets
from typing import Any

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.resources import EVENTS
from airflow_elastic.localcluster.store import Obj, Store, now


class Recorder:
    """Creates Events about objects; the same (object, reason, message) again increments ``count``."""

    def __init__(self, store: Store):
        self.store = store
        self._seen: dict[tuple[str, str, str], tuple[str, str]] = {}

    def record(self, involved: Obj, kind: str, reason: str, message: str, component: str, host: str = "") -> None:
        """Record ``reason``/``message`` (``kind``: ``Normal`` or ``Warning``) about ``involved``."""
        meta = involved["metadata"]
        namespace = meta.get("namespace") or "default"
        key = (meta.get("uid", ""), reason, message)
        stamp = now()
        if key in self._seen:
            event = self.store.find(EVENTS, *self._seen[key])
            if event is not None:
                self.store.update(EVENTS, {**event, "count": event.get("count", 1) + 1, "lastTimestamp": stamp})
                return
        source: dict[str, Any] = {"component": component}
        if host:
            source["host"] = host
        body = {
            "metadata": {"name": f"{meta['name']}.{secrets.token_hex(8)}", "namespace": namespace},
            "involvedObject": {
                "kind": involved.get("kind"),
                "namespace": meta.get("namespace"),
                "name": meta["name"],
                "uid": meta.get("uid"),
                "apiVersion": involved.get("apiVersion"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "source": source,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "reportingComponent": component,
            "reportingInstance": host,
        }
        try:
            created = self.store.create(EVENTS, namespace, body)
        except errors.NotFound:  # the namespace is gone
            return
        self._seen[key] = (namespace, created["metadata"]["name"])
