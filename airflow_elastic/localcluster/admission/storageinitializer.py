"""KServe's pod mutating webhook, storage part: pods annotated with a storage URI get the ``storage-initializer``.

As kserve/kserve ``pkg/webhook/admission/pod/storage_initializer_injector.go`` (``InjectStorageInitializer``,
``CommonStorageInitialization``) and ``pkg/utils/storage.go`` (``CreateInitContainerWithConfig``) with the stock
``storageInitializer`` config: an emptyDir ``kserve-provision-location`` mounted at ``/mnt/models`` in the init
container and read-only in ``kserve-container``, whose ``STORAGE_URI`` env (custom predictors) becomes the mount path.
Only pods being created are mutated; ``pvc://`` and OCI sources (mounted, not downloaded, upstream) are not special
here: the init container handles (or refuses) every URI.
"""

from __future__ import annotations

from airflow_elastic.localcluster.admission.inferenceservice import PREDICTOR_CONTAINER
from airflow_elastic.localcluster.images import STORAGE_INITIALIZER
from airflow_elastic.localcluster.store import Admission, Obj

#: ``StorageInitializerSourceUriInternalAnnotationKey``: the predictor pod's model URI, set by the controller.
STORAGE_URI_ANNOTATION = "internal.serving.kserve.io/storage-initializer-sourceuri"
MOUNT_PATH = "/mnt/models"  # constants.DefaultModelLocalMountPath
CONTAINER = "storage-initializer"
VOLUME = "kserve-provision-location"
USER_CONTAINERS = (PREDICTOR_CONTAINER, "transformer-container")


def inject(pod: Obj) -> None:
    """Add the init container, its volume and the model mount to ``pod`` (once)."""
    uri = (pod["metadata"].get("annotations") or {}).get(STORAGE_URI_ANNOTATION)
    spec = pod.setdefault("spec", {})
    if not uri or any(c.get("name") == CONTAINER for c in spec.get("initContainers") or []):
        return
    users = [c for c in spec.get("containers") or [] if c.get("name") in USER_CONTAINERS]
    if not users:
        return  # upstream: "Invalid configuration: cannot find container: kserve-container"
    spec.setdefault("volumes", []).append({"name": VOLUME, "emptyDir": {}})
    for container in users:
        container.setdefault("volumeMounts", []).append({"name": VOLUME, "mountPath": MOUNT_PATH, "readOnly": True})
        for env in container.get("env") or []:
            if env.get("name") == "STORAGE_URI":
                env["value"] = MOUNT_PATH
    spec.setdefault("initContainers", []).append(
        {
            "name": CONTAINER,
            "image": STORAGE_INITIALIZER,
            "args": [uri, MOUNT_PATH],
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "100m", "memory": "100Mi"}},
            "volumeMounts": [{"name": VOLUME, "mountPath": MOUNT_PATH}],
        }
    )


class StorageInitializerInjector:
    """Pod admission with KServe's injection first (mutating webhooks run before validation)."""

    def __init__(self, inner: Admission):
        self.inner = inner

    def admit_create(self, obj: Obj) -> None:
        inject(obj)
        self.inner.admit_create(obj)

    def admit_update(self, obj: Obj, old: Obj) -> None:
        self.inner.admit_update(obj, old)
