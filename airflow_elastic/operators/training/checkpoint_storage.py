"""The filesystem the operator reads a group's checkpoints through (to set ``AE_RESUME_FROM``).

Local paths and ``file://`` are read directly; a scheme an Airflow provider registers for object storage goes
through ``airflow.sdk.ObjectStoragePath`` (with ``Checkpointing.conn_id``, the provider's connection); any other
scheme through fsspec's own registry (``memory://``, or ``gs://`` with ``gcsfs`` and no Google provider). When the
worker has no backend for the scheme, the task fails at its start, naming the package to install: a group that
could never be resumed is not submitted, and a preempted one is never silently restarted from step 0.
"""

from __future__ import annotations

from airflow.sdk.exceptions import AirflowFailException

from airflow_elastic.contract import checkpoints
from airflow_elastic.training.spec import Checkpointing


class CheckpointStorageUnavailable(AirflowFailException):
    """The worker cannot read the group's checkpoint URI (no backend for its scheme); retrying will not help."""


def backend_package(scheme: str) -> str | None:
    """The package that implements ``scheme`` for fsspec (``gcsfs`` for ``gs``), from fsspec's own registry."""
    from fsspec.registry import known_implementations

    known = known_implementations.get(scheme)
    return known["class"].split(".", 1)[0] if known else None


def checkpoint_storage(checkpoint: Checkpointing) -> checkpoints.Storage:
    """The filesystem holding ``checkpoint.uri``, for :func:`airflow_elastic.contract.checkpoints.latest_complete`.

    Raises:
        CheckpointStorageUnavailable: the scheme's backend is not installed on this worker (the message names the
            package), no fsspec implementation knows the scheme, or ``conn_id`` is set for a scheme no Airflow
            provider registers.
    """
    uri = checkpoint.uri
    if checkpoints.is_local(uri):
        return checkpoints.LocalStorage()
    from airflow.sdk import ObjectStoragePath
    from airflow.sdk.io import has_fs

    scheme = uri.partition("://")[0]
    where = f"checkpoint URI {uri!r}"
    try:
        if has_fs(scheme):
            return ObjectStoragePath(uri, conn_id=checkpoint.conn_id).fs
        if checkpoint.conn_id is not None:
            raise CheckpointStorageUnavailable(
                f"{where}: no installed Airflow provider registers {scheme}:// for object storage, so "
                f"conn_id={checkpoint.conn_id!r} cannot be used; install that provider on the Airflow workers, or "
                f"drop conn_id to use the backend's default credentials"
            )
        import fsspec

        return fsspec.filesystem(scheme)
    except ImportError as error:
        package = backend_package(scheme) or getattr(error, "name", None) or "the scheme's fsspec backend"
        raise CheckpointStorageUnavailable(
            f"{where}: the Airflow worker has no filesystem for {scheme}://; install {package} on the workers "
            f"(pip install {package}) so the operator can find the checkpoint a resubmitted group resumes from "
            f"({error})"
        ) from error
    except ValueError as error:  # fsspec: "Protocol not known"
        raise CheckpointStorageUnavailable(
            f"{where}: no fsspec filesystem is known for {scheme}:// ({error}); use a scheme fsspec supports "
            f"(s3://, gs://, abfs://, ...) or a path on shared storage"
        ) from error
