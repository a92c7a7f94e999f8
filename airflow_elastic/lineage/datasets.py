"""What a task read and wrote, named as OpenLineage names datasets on file and object storage (pure).

A location is a plain absolute path or a URI, as the DAG gives it to its pods (``/mnt/night/data/v1``,
``file:///mnt/night/data/v1``, ``gs://bucket/night/data/v1``); :func:`dataset` names it after OpenLineage's naming
conventions (its namespace is the data source, its name the path within it), the way Airflow's own providers
translate ``file``, ``s3`` and ``gs`` assets:

- an absolute path or ``file:///path``: namespace ``file``, name ``/path``; ``file://host/path``: ``file://host``;
- an object store's ``scheme://bucket/key`` (``s3``, ``gs``, ``abfss``, ...; ``s3a``/``s3n`` are ``s3``, ``gcs`` is
  ``gs``): namespace ``scheme://bucket``, name ``key`` (no leading ``/``; the bucket's root is ``/``);
- any other ``scheme://authority/path``: namespace ``scheme://authority``, name ``/path``.

A trailing ``/`` does not make another dataset: ``gs://b/x/`` and ``gs://b/x`` are one. The decisions of what a
task's inputs and outputs are (:func:`training_lineage`, :func:`stage_lineage`) are here too; the operators only wrap
them into the OpenLineage provider's objects.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from airflow_elastic.training.spec import TrainingGroup

__all__ = ["Dataset", "Lineage", "dataset", "location_problems", "stage_lineage", "training_lineage"]

#: Object stores: the bucket (container) is the namespace, the object key the name (no leading ``/``).
OBJECT_STORES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs", "abfs": "abfs", "abfss": "abfss",
                 "wasb": "wasb", "wasbs": "wasbs", "az": "az", "oss": "oss", "r2": "r2"}  # fmt: skip
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
Problem = tuple[str, str]


@dataclass(frozen=True)
class Dataset:
    """An OpenLineage dataset's identity: ``namespace`` (the data source) and ``name`` (unique within it)."""

    namespace: str
    name: str


@dataclass(frozen=True)
class Lineage:
    """What a task read (``inputs``) and wrote (``outputs``), each dataset once, in the order given."""

    inputs: tuple[Dataset, ...] = ()
    outputs: tuple[Dataset, ...] = ()

    def on_failure(self) -> Lineage:
        """What a failed try reports: what it read; what it may have partly written is not an output."""
        return Lineage(self.inputs, ())


def dataset(location: str) -> Dataset:
    """The OpenLineage dataset of a storage ``location`` (an absolute path or a URI; see the module's table).

    Raises:
        ValueError: ``location`` is empty, relative, or a URI without a bucket or path.
    """
    if not isinstance(location, str) or not location.strip():
        raise ValueError(f"a location must be a non-empty path or URI, got {location!r}")
    location = location.strip()
    if not _SCHEME.match(location):
        if not location.startswith("/"):
            raise ValueError(f"a local location must be absolute (or a URI), got {location!r}")
        return Dataset("file", _path(location))
    parts = urlsplit(location)
    scheme = parts.scheme.lower()
    if scheme == "file":
        if not parts.path.startswith("/"):
            raise ValueError(f"a file URI needs an absolute path, got {location!r}")
        return Dataset(f"file://{parts.netloc}" if parts.netloc else "file", _path(parts.path))
    if not parts.netloc:
        raise ValueError(f"{location!r} names no bucket or authority")
    if scheme in OBJECT_STORES:
        key = _path(parts.path).lstrip("/")
        return Dataset(f"{OBJECT_STORES[scheme]}://{parts.netloc}", key or "/")
    return Dataset(f"{scheme}://{parts.netloc}", _path(parts.path or "/"))


def _path(path: str) -> str:
    """``path`` without a trailing ``/`` (the root stays ``/``) nor ``.``/``..`` steps."""
    normal = posixpath.normpath(path) if path else "/"
    return "/" if normal in ("/", "//") else normal


def location_problems(field: str, locations: Any) -> list[Problem]:
    """What is wrong with an operator's ``lineage_inputs``/``lineage_outputs`` argument ``field``: not a list of
    strings, or an entry that is no location (entries with Jinja are checked by :func:`dataset` once rendered)."""
    if isinstance(locations, str) or not isinstance(locations, Sequence):
        return [(field, f"must be a list of paths or URIs, got {locations!r:.200}")]
    problems: list[Problem] = []
    for index, location in enumerate(locations):
        if isinstance(location, str) and "{{" in location:
            continue
        try:
            dataset(location)
        except ValueError as error:
            problems.append((f"{field}[{index}]", str(error)))
    return problems


def training_lineage(group: TrainingGroup | None, inputs: Iterable[str], outputs: Iterable[str]) -> Lineage:
    """A training group's lineage: it reads ``inputs`` and writes ``outputs`` and its checkpoint directory (the
    rendered group's ``checkpoint.uri``: a trial's own directory for a sweep trial), the model's weights."""
    written = [*outputs]
    if group is not None and group.checkpoint is not None:
        written.append(group.checkpoint.uri)
    return _lineage(inputs, written)


def stage_lineage(inputs: Iterable[str], outputs: Iterable[str], outlet_extra: Mapping[str, Any]) -> Lineage:
    """A batch stage's lineage: it reads ``inputs`` and writes ``outputs`` and, when its ``outlet_extra`` names the
    ``uri`` of the asset it produced, that location."""
    written = [*outputs]
    uri = outlet_extra.get("uri")
    if isinstance(uri, str) and uri.strip():
        written.append(uri)
    return _lineage(inputs, written)


def _lineage(inputs: Iterable[str], outputs: Iterable[str]) -> Lineage:
    return Lineage(_unique(inputs), _unique(outputs))


def _unique(locations: Iterable[str]) -> tuple[Dataset, ...]:
    return tuple(dict.fromkeys(dataset(location) for location in locations))
