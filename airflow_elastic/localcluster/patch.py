"""The three patch formats of the Kubernetes API: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and
strategic merge patch (lists merged by the ``x-kubernetes-patch-merge-key`` of the type's schema)."""

from __future__ import annotations

import copy
from typing import Any

from airflow_elastic.localcluster import apitypes, errors

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"


class PatchFailed(errors.ApiError):
    """A JSON patch that does not apply to the object (the API server answers 422)."""

    code, reason = 422, "Invalid"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ----------------------------------------------------------------------------------------------- RFC 6902


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise errors.BadRequest(f"invalid JSON pointer {path!r}: it must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, path: str, *, adding: bool = False) -> int:
    if adding and token == "-":
        return len(container)
    if not token.isdigit():
        raise PatchFailed(f"invalid array index {token!r} in {path}")
    i = int(token)
    if i > len(container) or (i == len(container) and not adding):
        raise PatchFailed(f"array index {i} out of bounds in {path}")
    return i


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, path)]
        else:
            raise PatchFailed(f"doc is missing path: {path!r}")
    return node


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, path)]
    raise PatchFailed(f"doc is missing path: {path!r}")


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    parent, last = _parent(doc, tokens, path), tokens[-1] if tokens else ""
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, path))
    raise PatchFailed(f"unable to remove nonexistent key: {last}: missing value")


def _add(doc: Any, path: str, value: Any, *, replace: bool = False) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise PatchFailed(f"replace operation does not apply: doc is missing key: {path}")
        parent[last] = value
    elif isinstance(parent, list):
        i = _index(parent, last, path, adding=not replace)
        if replace:
            parent[i] = value
        else:
            parent.insert(i, value)
    else:
        raise PatchFailed(f"doc is missing path: {path!r}")
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 ``add``/``remove``/``replace``/``move``/``copy``/``test``."""
    if not isinstance(operations, list):
        raise errors.BadRequest("json patch must be a JSON array of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise errors.BadRequest(f"invalid json patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace") and "value" not in op:
            raise errors.BadRequest(f'json patch "{kind}" operation on {path} has no "value"')
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "replace":
            doc = _add(doc, path, copy.deepcopy(op["value"]), replace=True)
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "move":
            doc = _add(doc, path, _remove(doc, op["from"]))
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op["from"])))
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchFailed(f"testing value {path} failed: test failed")
        else:
            raise errors.BadRequest(f"Unexpected kind: {kind}")
    return doc


# ------------------------------------------------------------------------------------- strategic merge patch

_DIRECTIVE = "$patch"
_DELETE_FROM = "$deleteFromPrimitiveList/"
_ORDER = "$setElementOrder/"
_RETAIN = "$retainKeys"


def _merge_list(target: list[Any], patch: list[Any], node: apitypes.Node | None) -> list[Any]:
    strategy = (node or {}).get("x-kubernetes-patch-strategy", "")
    key = (node or {}).get("x-kubernetes-patch-merge-key")
    if "merge" not in strategy.split(","):
        return [_strip(p) for p in patch if not (isinstance(p, dict) and p.get(_DIRECTIVE))]
    if key is None:  # a set of primitives
        merged = list(target)
        merged += [p for p in patch if p not in merged]
        return merged
    result = copy.deepcopy(target)
    for item in patch:
        if not isinstance(item, dict):
            raise errors.BadRequest(f"strategic merge patch: list item {item!r} has no merge key {key!r}")
        if item.get(_DIRECTIVE) == "replace":
            return [_strip(p) for p in patch if p.get(_DIRECTIVE) != "replace"]
        found = next((i for i, t in enumerate(result) if isinstance(t, dict) and t.get(key) == item.get(key)), None)
        if item.get(_DIRECTIVE) == "delete":
            result = [t for t in result if not (isinstance(t, dict) and t.get(key) == item.get(key))]
        elif found is None:
            result.append(_strip(item))
        else:
            result[found] = strategic_merge(result[found], item, apitypes.items(node))
    return result


def _strip(value: Any) -> Any:
    """Drop patch directives from a value that is inserted as a whole."""
    if isinstance(value, dict):
        return {
            k: _strip(v)
            for k, v in value.items()
            if k not in (_DIRECTIVE, _RETAIN) and not k.startswith((_DELETE_FROM, _ORDER)) and v is not None
        }
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def strategic_merge(target: Any, patch: Any, node: apitypes.Node | None) -> Any:
    """Apply a strategic merge patch to ``target`` whose schema is ``node``."""
    if not isinstance(patch, dict) or not isinstance(target, dict):
        return _strip(patch)
    directive = patch.get(_DIRECTIVE)
    if directive == "replace":
        return _strip(patch)
    if directive == "delete":
        return None
    result = copy.deepcopy(target)
    if _RETAIN in patch:
        keep = set(patch[_RETAIN])
        result = {k: v for k, v in result.items() if k in keep}
    for key, value in patch.items():
        if key in (_DIRECTIVE, _RETAIN) or key.startswith(_ORDER):
            continue
        if key.startswith(_DELETE_FROM):
            field = key[len(_DELETE_FROM) :]
            result[field] = [v for v in result.get(field) or [] if v not in value]
            continue
        sub = apitypes.child(node, key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and isinstance(result.get(key), list):
            result[key] = _merge_list(result[key], value, sub)
        elif isinstance(value, dict):
            merged = strategic_merge(result.get(key) if isinstance(result.get(key), dict) else {}, value, sub)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = _strip(value)
    return result
