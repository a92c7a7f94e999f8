"""Dies at the worst moment of counting a failed pod: the Job controller has written the Job's status (``failed``
incremented) and not yet removed the pod's ``batch.kubernetes.io/job-tracking`` finalizer. A SIGKILL lands
there only by chance; this makes that crash deterministic (``os._exit``: no cleanup, no commit, no flush).

Usage: ``crash_job_tracking.py STATE_DB`` — exits with status 97 at the crash point, leaving Job ``tracked``
(backoffLimit 6) and its failed pod in the store.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from airflow_elastic.localcluster import admission
from airflow_elastic.localcluster.components import bootstrap
from airflow_elastic.localcluster.controllers.job import JobController
from airflow_elastic.localcluster.controllers.jobpolicy import TRACKING_FINALIZER
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.resources import JOBS, PODS
from airflow_elastic.localcluster.store import Obj, Store

CRASHED = 97
POD_SPEC = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "python:3", "command": ["true"]}]}


def main() -> None:
    store = Store(Path(sys.argv[1]))
    bootstrap(store)
    admission.register(store)
    controller = JobController(store, Recorder(store))
    job = store.create(JOBS, "default", {"metadata": {"name": "tracked"}, "spec": {"template": {"spec": POD_SPEC}}})
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "tracked", "uid": job["metadata"]["uid"]}
    pod = store.create(
        PODS,
        "default",
        {
            "metadata": {
                "name": "tracked-abcde",
                "labels": job["spec"]["template"]["metadata"]["labels"],
                "finalizers": [TRACKING_FINALIZER],
                "ownerReferences": [{**owner, "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": {**POD_SPEC, "nodeName": "node-0"},
        },
    )
    store.update(PODS, {"metadata": pod["metadata"], "status": {"phase": "Failed"}}, subresource="status")

    def crash(pod: Obj) -> None:
        os._exit(CRASHED)

    controller._release = crash  # type: ignore[method-assign]
    asyncio.run(controller.reconcile(("default", "tracked")))
    sys.exit("the controller never released the pod")


if __name__ == "__main__":
    main()
