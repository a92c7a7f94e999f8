"""What a wait saves on its JobSet so that a restarted waiter resumes with it (pure).

The evidence of why pods stopped exists only while they are observed: the JobSet deletes an attempt's pods when
it restarts, and a vanished node leaves nothing behind. The waiter's memory of it would die with a triggerer
restart (or a trigger moved to another triggerer, a re-deferral, a restarted sync worker), and a preempted attempt
that then failed would look genuine. So the watch keeps it in an annotation on the awaited JobSet itself:

* **why the JobSet**: the trigger cannot write ``task_state_store`` (Airflow 3.3's triggerer serves only the asset
  state store to triggers) and cannot change its own serialized kwargs; the JobSet is the one durable object both
  the triggerer and the worker already read on every look (the shared list carries it), the grant to patch it
  exists (``docker/k8s/rbac.yaml``), and its lifetime is exactly that of the evidence (one JobSet, one attempt);
* **what**: per restart attempt the decisive record (``evidence.decisive`` of a prefix plus what follows is the
  decisive record of the whole, so nothing a verdict depends on is lost), the pods already classified that still
  exist (not recorded twice), the stops absorbed in cluster (each a preemption counted), the failed pods retried
  in place (each a failure counted) and the spot samples, as compact JSON; written by a JSON merge patch of
  ``metadata.annotations`` only when a pod stopped, so neither the JobSet's spec nor the controller's status is
  touched and no write conflicts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from airflow_elastic.kube.labels import EVIDENCE_ANNOTATION as EVIDENCE_ANNOTATION
from airflow_elastic.preemption.evidence import Evidence, attempt_causes


def patch(evidence: Evidence) -> dict[str, Any]:
    """The JSON merge patch that saves ``evidence`` on its JobSet."""
    present = set(evidence.last)
    saved = {
        "records": [dict(r) for r in attempt_causes(evidence.records).values()],
        "done": sorted(evidence.done & present),
        "running": evidence.running_samples,
        "spot": evidence.spot_samples,
        "absorbed": evidence.absorbed,
        "retried": evidence.retried,
    }
    text = json.dumps(saved, separators=(",", ":"), sort_keys=True)
    return {"metadata": {"annotations": {EVIDENCE_ANNOTATION: text}}}


def restore(jobset: Mapping[str, Any]) -> Evidence | None:
    """The evidence saved on ``jobset`` (``None``: none, or unreadable: then the wait starts without it)."""
    text = ((jobset.get("metadata") or {}).get("annotations") or {}).get(EVIDENCE_ANNOTATION)
    if not text:
        return None
    try:
        saved = json.loads(text)
        return Evidence(
            done={str(uid) for uid in saved.get("done") or ()},
            records=[dict(r) for r in saved.get("records") or ()],
            running_samples=int(saved.get("running") or 0),
            spot_samples=int(saved.get("spot") or 0),
            absorbed=[dict(r) for r in saved.get("absorbed") or ()],
            retried=[dict(r) for r in saved.get("retried") or ()],
        )
    except (ValueError, TypeError, AttributeError):
        return None
