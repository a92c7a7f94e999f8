"""The evidence a trigger saves on its JobSet, against the local cluster: the real merge patch of an annotation on a
JobSet the controller keeps updating, and a new waiter restoring it from its first look."""

from __future__ import annotations

import asyncio
import json

from airflow_elastic.preemption.saved import EVIDENCE_ANNOTATION, restore
from tests.support.live_triggers import FAIL, first_event, submit, trigger


def test_a_failed_pod_is_saved_on_its_jobset(hook, connection, namespace):
    uid = submit(hook, namespace, "saved", FAIL)
    waiter = trigger(connection, namespace, "saved", uid, capture_evidence=True)
    event = asyncio.run(asyncio.wait_for(first_event(waiter), 120))
    assert event["status"] == "failed"
    jobset = hook.get_jobset(namespace, "saved")
    saved = json.loads(jobset["metadata"]["annotations"][EVIDENCE_ANNOTATION])
    assert [r["pod"] for r in saved["records"]] == [r["pod"] for r in event["evidence"]]
    assert jobset["spec"]["replicatedJobs"] and jobset["status"]["conditions"]  # nothing else changed
    restored = restore(jobset)
    assert restored is not None and restored.records == saved["records"]
