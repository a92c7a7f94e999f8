"""The provider's only Kubernetes API I/O: ``JobSetHook`` (blocking) and ``AsyncJobSetHook`` (triggers).

The hooks load Airflow and the Kubernetes clients; the errors, the retry policy and the protocols do not, so this
package resolves its names lazily and ``from airflow_elastic.hooks import NotFound`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_elastic.hooks.async_jobset import AsyncJobSetHook
    from airflow_elastic.hooks.connection import ImplicitClusterRefused
    from airflow_elastic.hooks.errors import (
        AlreadyExists,
        ApiUnreachable,
        BadRequest,
        Conflict,
        Forbidden,
        Gone,
        Invalid,
        KubernetesApiError,
        NotFound,
        ServerError,
        Throttled,
        Unauthorized,
    )
    from airflow_elastic.hooks.jobset import JobSetHook
    from airflow_elastic.hooks.protocol import AsyncJobSetHookProtocol, JobSetHookProtocol
    from airflow_elastic.hooks.retry import RetryPolicy

__all__ = [
    "AlreadyExists",
    "ApiUnreachable",
    "AsyncJobSetHook",
    "AsyncJobSetHookProtocol",
    "BadRequest",
    "Conflict",
    "Forbidden",
    "Gone",
    "ImplicitClusterRefused",
    "Invalid",
    "JobSetHook",
    "JobSetHookProtocol",
    "KubernetesApiError",
    "NotFound",
    "RetryPolicy",
    "ServerError",
    "Throttled",
    "Unauthorized",
]

_MODULE = {
    "JobSetHook": "jobset",
    "AsyncJobSetHook": "async_jobset",
    "ImplicitClusterRefused": "connection",
    "JobSetHookProtocol": "protocol",
    "AsyncJobSetHookProtocol": "protocol",
    "RetryPolicy": "retry",
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE.get(name, 'errors')}"), name)
