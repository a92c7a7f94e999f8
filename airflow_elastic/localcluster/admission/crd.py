"""What the API server does with a custom resource before its webhooks validate it, and how it relays a denial.

A CRD's structural schema prunes unknown fields and applies its ``default``s, then the object is validated
against the schema (422 ``Invalid``); a validating webhook's denial (controller-runtime's ``admission.Denied``) is
a 403 ``Forbidden`` whose message names the webhook.
"""

from __future__ import annotations

from typing import Any

import jsonschema

from airflow_elastic.kube import schemas
from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.admission.common import Causes, dns1123_subdomain
from airflow_elastic.localcluster.admission.jobset import _schema_cause, prune_and_default
from airflow_elastic.localcluster.store import Obj


class WebhookDenied(errors.ApiError):
    """A validating webhook's denial as the API server relays it."""

    code, reason = 403, "Forbidden"


def aggregate(messages: list[str]) -> str:
    """``utilerrors.NewAggregate(...).Error()``: one message as is, several as ``[a, b]``, repeats once."""
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def deny(webhook: str, messages: list[str]) -> None:
    """Raise the API server's error for ``webhook`` rejecting the request with ``messages`` (none: allowed)."""
    if messages:
        raise WebhookDenied(f'admission webhook "{webhook}" denied the request: {aggregate(messages)}')


class CrdSchema:
    """The ``openAPIV3Schema`` of one packaged CRD, applied as the API server applies it."""

    def __init__(self, schema_file: str, kind: str, group: str):
        self.kind, self.group = kind, group
        self.schema: dict[str, Any] = schemas.load(schema_file)
        self._validator = jsonschema.Draft7Validator(self.schema)

    def prune_and_default(self, obj: Obj) -> None:
        """Structural pruning and defaulting (metadata is the API server's own, untouched here)."""
        prune_and_default(obj, {**self.schema, "properties": {**self.schema["properties"], "metadata": {}}})

    def causes(self, obj: Obj) -> Causes:
        """The name's and the schema's errors, in field order."""
        name = obj["metadata"].get("name", "")
        causes = [errors.cause("metadata.name", f'Invalid value: "{name}": {m}') for m in dns1123_subdomain(name)]
        for err in sorted(self._validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
            causes += _schema_cause(err)
        return causes

    def invalid(self, obj: Obj, causes: Causes) -> errors.Invalid:
        return errors.Invalid.of(self.kind, obj["metadata"].get("name", ""), causes, self.group)
