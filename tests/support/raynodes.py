"""A namespace for tests that run real Ray nodes (``rayproject/ray`` pods need ``.venv-ray``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_elastic.localcluster.images import ray_environment

IMAGE = "rayproject/ray:2.60.0"


def ray_namespace(core: Any, prefix: str) -> Iterator[str]:
    """Yield a fresh namespace ``<prefix>-<8 hex>`` (deleted after); skip when Ray's environment is not installed."""
    try:
        ray_environment(IMAGE)
    except LookupError as err:
        pytest.skip(str(err))
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)
