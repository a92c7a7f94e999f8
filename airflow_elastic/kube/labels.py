"""Well-known label, annotation and taint keys.

Every key the provider writes onto, or reads from, a Kubernetes object is defined here once: Kubernetes', JobSet's,
Kueue's, Kubeflow's, KServe's and the provider's own ``airflow-elastic.io/...``. Renderers, watchers and glue import
them from here, so a key cannot drift between the code that writes it and the code that reads it. (``runtime/``, which
runs in training pods and imports only :mod:`airflow_elastic.contract`, keeps a copy of the JobSet keys it reads; a
unit test holds the two equal. The local cluster implements the upstream controllers and keeps its own.)

Fixed container names are in :mod:`airflow_elastic.kube.names`; the spot labels and taints of each cloud are in
:mod:`airflow_elastic.kube.platforms`, which also defines the provider's :data:`DOMAIN` and its generic spot keys
(re-exported here).
"""

# The provider's own keys.

from airflow_elastic.kube.platforms import CAPACITY_TYPE_LABEL as CAPACITY_TYPE_LABEL
from airflow_elastic.kube.platforms import DOMAIN as DOMAIN
from airflow_elastic.kube.platforms import SPOT_TAINT as SPOT_TAINT

#: The value of :data:`MANAGED_BY_LABEL` on everything the provider renders (the triggers' shared watch selects it).
MANAGER = "airflow-elastic"
#: The training group a JobSet, TrainJob or PyTorchJob (and each of its pods) belongs to.
GROUP_LABEL = f"{DOMAIN}/group"
#: The Ray cluster description (``airflow_elastic.ray.RayCluster``) a RayJob, and each of its pods, renders.
RAY_CLUSTER_LABEL = f"{DOMAIN}/ray-cluster"
#: The group's role of a pod (JobSet's own :data:`REPLICATED_JOB_LABEL` carries the same name on JobSets).
GROUP_ROLE_LABEL = f"{DOMAIN}/role"
#: The batch stage a Job or CronJob belongs to.
STAGE_LABEL = f"{DOMAIN}/stage"
#: The sweep and trial number of a sweep trial's group.
SWEEP_LABEL = f"{DOMAIN}/sweep"
TRIAL_LABEL = f"{DOMAIN}/trial"
#: The task instance that owns an object (sanitised label values), and its try: the identity of a submission.
DAG_LABEL = f"{DOMAIN}/dag-id"
TASK_LABEL = f"{DOMAIN}/task-id"
RUN_LABEL = f"{DOMAIN}/run-id"
MAP_INDEX_LABEL = f"{DOMAIN}/map-index"
TRY_LABEL = f"{DOMAIN}/try"
#: The JobSet annotation that keeps a wait's preemption evidence across waiter restarts.
EVIDENCE_ANNOTATION = f"{DOMAIN}/evidence"
#: The CronJob annotation with the rendering last applied: an update sends the merge patch from it (``kubectl apply``).
LAST_APPLIED_ANNOTATION = f"{DOMAIN}/last-applied"

# Kubernetes.

#: Who manages an object (``app.kubernetes.io`` recommended labels); the provider sets it to :data:`MANAGER`.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
#: kubectl's default container of a pod (``kubectl logs`` without ``-c``); the log follower reads it too.
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
#: The label the Job controller puts on every pod of a Job (upstream since 1.27; the legacy ``job-name`` too).
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
#: A pod's index in an Indexed Job (annotation, and label since 1.28; ``pkg/controller/job/indexed_job_utils.go``).
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
#: The node lifecycle controller's taints for a node that stopped reporting (``Ready=Unknown``) or is not ready: a
#: pod is evicted once its ``NoExecute`` toleration of them runs out (300 s from DefaultTolerationSeconds).
NODE_UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
NODE_NOT_READY_TAINT = "node.kubernetes.io/not-ready"
NODE_LOSS_TAINTS = (NODE_UNREACHABLE_TAINT, NODE_NOT_READY_TAINT)

# JobSet (sigs.k8s.io/jobset ``api/jobset/v1alpha2/jobset_types.go``): on its Jobs and their pods.

JOBSET_DOMAIN = "jobset.sigs.k8s.io"
JOBSET_NAME_LABEL = f"{JOBSET_DOMAIN}/jobset-name"
#: The replicated Job of a pod: the training group's role.
REPLICATED_JOB_LABEL = f"{JOBSET_DOMAIN}/replicatedjob-name"
#: How many times the JobSet restarted (label and annotation); a restart's pods carry the new number.
RESTART_ATTEMPT_LABEL = f"{JOBSET_DOMAIN}/restart-attempt"
#: JobSet's per-Job index within its replicated job (the rank within a role, one pod per Job).
JOB_INDEX_LABEL = f"{JOBSET_DOMAIN}/job-index"
#: The Job's index across all replicated jobs (the global rank, one pod per Job).
JOB_GLOBAL_INDEX_LABEL = f"{JOBSET_DOMAIN}/job-global-index"
#: Places each Job of a replicated job alone in one topology domain (e.g. a rack); the value is the topology key.
EXCLUSIVE_TOPOLOGY_ANNOTATION = f"alpha.{JOBSET_DOMAIN}/exclusive-topology"

# Kueue.

#: The LocalQueue a workload is submitted to.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

# Kubeflow training-operator v1 (kubeflow/trainer release-1.9 ``pkg/controller.v1/common/pod.go``): on PyTorchJob pods.

KUBEFLOW_JOB_NAME_LABEL = "training.kubeflow.org/job-name"
KUBEFLOW_REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
KUBEFLOW_REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"

# KServe (``pkg/constants/constants.go``).

#: The InferenceService annotation that picks the deployment mode (``DeploymentMode``).
DEPLOYMENT_MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
#: The pod annotation the storage URI is written to (``StorageInitializerSourceUriInternalAnnotationKey``).
STORAGE_SOURCE_URI_ANNOTATION = "internal.serving.kserve.io/storage-initializer-sourceuri"
