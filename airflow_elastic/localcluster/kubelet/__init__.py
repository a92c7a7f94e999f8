"""The process kubelet: runs each pod's containers as local processes on the one host.

What differs from a real node, on purpose and visibly:

* **Images are not pulled.** A container runs its ``command`` + ``args``; without a ``command`` the cluster's
  ``image_map[image]`` stands for the image entrypoint. Nothing to run → ``ErrImagePull`` / ``ImagePullBackOff``.
  With ``strict_images`` every image must be in ``image_map``. ``imageID`` is a fake digest of the image name.
* **Processes.** Each container is a process group in its own session, cwd
  ``<state>/pods/<ns>_<pod>_<uid>/containers/<container>`` (kept across restarts of the container), stdin
  ``/dev/null``, stdout+stderr appended to ``config.log_path(...)`` (restarts append to the same file). The
  environment is minimal: ``PATH`` (the cluster interpreter's directory first), ``HOME`` (= cwd), ``LANG``,
  ``HOSTNAME`` (the pod's hostname), then the container's env. Resource limits are not enforced.
* **Mounts.** There is no mount namespace. A volumeMount at ``/data/ckpt`` becomes a symlink
  ``<cwd>/data/ckpt`` → the volume's directory, and ``LOCALCLUSTER_MOUNT_DATA_CKPT`` = that directory (absolute);
  programs should open mount paths relative to their cwd or through that variable. ``readOnly`` is not enforced.
  Volumes: ``emptyDir`` (also ``medium: Memory``) → ``<pod dir>/volumes/<name>``; ``hostPath`` → the path itself;
  ``persistentVolumeClaim`` → ``<state>/volumes/<ns>/<claimName>`` shared by every pod of the claim;
  ``configMap`` / ``secret`` / ``downwardAPI`` / ``projected`` → files written from the store when the container
  starts (not refreshed later). Other types are empty directories, with a warning event.
* **In-cluster credentials.** Every container gets ``KUBERNETES_SERVICE_HOST`` (``127.0.0.1``; with pod network
  namespaces, the host's address on the cluster's bridge) and
  ``KUBERNETES_SERVICE_PORT`` (the API server's port; the container's own env may override them) and, unless the
  pod sets ``automountServiceAccountToken: false``, the service-account directory (``token``, ``ca.crt``,
  ``namespace``) mounted by the convention above at ``/var/run/secrets/kubernetes.io/serviceaccount``: a symlink
  under the cwd and ``LOCALCLUSTER_MOUNT_VAR_RUN_SECRETS_KUBERNETES_IO_SERVICEACCOUNT``. The token is the cluster's
  single bearer token (no RBAC), linked so a rotated token reaches running pods. See :mod:`.serviceaccount`.
* **Termination message.** ``terminationMessagePath`` cannot be written as an absolute path; each container gets
  its own file, ``<pod dir>/termination/<container>``, named by ``LOCALCLUSTER_TERMINATION_LOG`` and also linked at
  ``<cwd>/<terminationMessagePath without leading />`` (``<cwd>/dev/termination-log`` by default). Its first 4096
  bytes become ``state.terminated.message``; ``FallbackToLogsOnError`` uses the last 80 lines / 2048 bytes of the
  log after a failure when the file is empty.
* **Networking.** On Linux as root each pod has its own network namespace (:mod:`airflow_elastic.localcluster.podnet`);
  elsewhere a loopback pod IP on the host's network. DNS names are rewritten in command, args and env values in
  both (:mod:`airflow_elastic.localcluster.network`).
* **Restarts.** ``Always``/``OnFailure`` restart a container at once after its first exit, then after
  ``backoff_base`` seconds doubling up to ``backoff_max`` (10 s and 5 min as upstream; configurable for tests).
* **Probes.** Readiness probes (exec, tcpSocket, httpGet) only; liveness and startup probes are not run.
* **Cluster restarts.** Nothing outlives the cluster: :meth:`Kubelet.shutdown` stops every process group, and
  :func:`reap_orphans` kills groups recorded in pid files by a run that died. Pods that had started in a previous
  run end ``Failed`` with reason ``NodeRestart``, their unfinished containers ``terminated`` with reason
  ``Unknown`` and exit code 255 (what a node reports after a reboot), whatever their restartPolicy.
  **Not a disruption:** no ``DisruptionTarget`` condition is added. A real node that reboots without a graceful
  shutdown (crash, power cycle) comes back with its ``restartPolicy: Never`` pods ``Failed`` and no such
  condition (only graceful node shutdown, eviction, preemption, the taint manager and PodGC add one). So the Job
  counts the pod against ``backoffLimit``, a podFailurePolicy rule on ``DisruptionTarget`` does not match, and a
  JobSet restart it causes counts towards ``maxRestarts`` (match ``onExitCodes: [255]`` to treat it otherwise).
  ``cluster down`` (SIGTERM) is reported the same way on the next ``up``: it stops processes without writing
  statuses, so a crash and a stop leave the same state.
"""

from airflow_elastic.localcluster.kubelet.kubelet import NODE_RESTART_REASON, Kubelet
from airflow_elastic.localcluster.kubelet.procs import reap_orphans

__all__ = ["NODE_RESTART_REASON", "Kubelet", "reap_orphans"]
