"""JobSet shapes as real clusters report them."""

from __future__ import annotations


def jobset(conditions=(), suspend=False, restarts=0, counted=0, rjobs=(("leader", 1, 0), ("worker", 2, 0))):
    return {
        "metadata": {"name": "train-abc123", "namespace": "ml"},
        "spec": {"suspend": suspend, "replicatedJobs": [{"name": n, "replicas": r} for n, r, _ in rjobs]},
        "status": {
            "conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions],
            "restarts": restarts,
            "restartsCountTowardsMax": counted,
            "replicatedJobsStatus": [{"name": n, "ready": ready, "succeeded": 0} for n, _, ready in rjobs],
        },
    }
