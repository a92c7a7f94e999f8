"""Well-known label and annotation keys: Kubernetes', JobSet's and the provider's own (a leaf: no imports)."""

#: kubectl's default container of a pod (``kubectl logs`` without ``-c``); the log follower reads it too.
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
#: JobSet's per-Job index within its replicated job (the rank within a role, one pod per Job).
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
