"""Label and field selectors, parsed and matched as the API server does."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from airflow_elastic.localcluster.errors import BadRequest

Matcher = Callable[[Mapping[str, Any]], bool]

_SET = re.compile(r"^\s*([^\s!=,()]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ = re.compile(r"^\s*([^\s!=,()]+)\s*(==|=|!=)\s*([^\s!=,()]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=,()]+)\s*$")


def _split(selector: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current)
    return parts


def _label_in(key: str, values: set[str], *, inside: bool) -> Matcher:
    return lambda labels: (labels.get(key) in values) == inside


def _label_equals(key: str, value: str, *, equal: bool) -> Matcher:
    return lambda labels: (labels.get(key) == value) == equal


def _label_exists(key: str, *, present: bool) -> Matcher:
    return lambda labels: (key in labels) == present


def parse_label_selector(selector: str | None) -> Matcher:
    """A matcher for a label selector string (``a=b,c!=d,e in (x,y),!f``)."""
    if not selector or not selector.strip():
        return lambda labels: True
    tests: list[Matcher] = []
    for part in _split(selector):
        if m := _SET.match(part):
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",") if v.strip()}
            tests.append(_label_in(key, values, inside=op == "in"))
        elif m := _EQ.match(part):
            key, op, value = m.groups()
            tests.append(_label_equals(key, value, equal=op != "!="))
        elif m := _EXISTS.match(part):
            negate, key = m.groups()
            tests.append(_label_exists(key, present=not negate))
        else:
            raise BadRequest(f"unable to parse requirement: {part.strip()!r}")
    return lambda labels: all(t(labels) for t in tests)


def selector_string(selector: Mapping[str, Any]) -> str:
    """A ``metav1.LabelSelector`` as ``LabelSelectorAsSelector(...).String()`` prints it: requirements sorted by key,
    ``k=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k`` (what a built-in ``Scale`` reports as its selector)."""
    parts = [(k, f"{k}={v}") for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], ",".join(sorted(expr.get("values") or []))
        shown = {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": key}.get(op, f"!{key}")
        parts.append((key, shown))
    return ",".join(shown for _, shown in sorted(parts, key=lambda part: part[0]))


def match_label_selector(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` match a ``metav1.LabelSelector`` object (matchLabels + matchExpressions)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], set(expr.get("values") or [])
        if (
            (op == "In" and labels.get(key) not in values)
            or (op == "NotIn" and key in labels and labels[key] in values)
            or (op == "Exists" and key not in labels)
            or (op == "DoesNotExist" and key in labels)
        ):
            return False
    return True


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string value of a selectable field (missing → empty string; booleans as ``true``/``false``)."""
    if path == "status.podIPs":
        return ",".join(ip.get("ip", "") for ip in obj.get("status", {}).get("podIPs") or [])
    if path == "source":  # events: source.component
        return str(obj.get("source", {}).get("component", ""))
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
        if node is None:
            break
    if isinstance(node, bool):
        return "true" if node else "false"
    if node is None:
        return "false" if path == "spec.unschedulable" else ""
    return str(node)


def _field_equals(path: str, value: str, *, equal: bool) -> Matcher:
    return lambda obj: (field_value(obj, path) == value) == equal


def parse_field_selector(selector: str | None, allowed: frozenset[str], kind: str) -> Matcher:
    """A matcher for a field selector; fields the real server does not support for ``kind`` give 400."""
    if not selector or not selector.strip():
        return lambda obj: True
    tests: list[Matcher] = []
    for part in _split(selector):
        m = _EQ.match(part)
        if not m:
            raise BadRequest(f"invalid selector: {selector!r}; can't understand {part.strip()!r}")
        path, op, value = m.groups()
        if path not in allowed:
            raise BadRequest(f'"{path}" is not a known field selector: only "{", ".join(sorted(allowed))}"')
        tests.append(_field_equals(path, value, equal=op != "!="))
    return lambda obj: all(t(obj) for t in tests)
