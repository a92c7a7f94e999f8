"""A sweep's search space: named dimensions, validated when the DAG file is parsed (pure, standard library only).

``uniform``/``loguniform`` are continuous ranges, ``randint`` an integer range with **both ends inclusive** (like
Optuna's ``suggest_int`` and Katib's ``int`` feasibleSpace), ``choice`` a list of JSON values. A space is a plain
``dict`` of name to dimension; :func:`to_json`/:func:`from_json` carry it through trigger payloads and XCom.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from airflow_elastic.training.spec import SpecError

__all__ = [
    "ALGORITHMS",
    "Choice",
    "Dimension",
    "LogUniform",
    "RandInt",
    "Uniform",
    "choice",
    "contains",
    "from_json",
    "grid",
    "grid_size",
    "loguniform",
    "randint",
    "to_json",
    "uniform",
    "validate_space",
]

#: Search algorithms a sweep accepts: Optuna's TPE and random samplers, or every combination in order.
ALGORITHMS = ("tpe", "random", "grid")


@dataclass(frozen=True)
class _Range:
    low: Any
    high: Any


class Uniform(_Range):
    """A float drawn uniformly from ``[low, high]``."""


class LogUniform(_Range):
    """A float whose logarithm is uniform over ``[log(low), log(high)]`` (learning rates, weight decay)."""


class RandInt(_Range):
    """An integer from ``low`` to ``high``, both inclusive (``RandInt(1, 4)`` is one of 1, 2, 3, 4)."""


@dataclass(frozen=True)
class Choice:
    """One of ``values`` (JSON values: strings, numbers, booleans, None, lists and dicts of those)."""

    values: tuple[Any, ...]


Dimension = Uniform | LogUniform | RandInt | Choice
_KINDS: dict[str, type] = {"uniform": Uniform, "loguniform": LogUniform, "randint": RandInt, "choice": Choice}


def _is_real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _range(kind: str, low: Any, high: Any, *, positive: bool = False, integer: bool = False) -> list[str]:
    check, what = (_is_int, "integers") if integer else (_is_real, "finite numbers")
    if not (check(low) and check(high)):
        return [f"{kind}(low, high) needs {what}, got low={low!r}, high={high!r}"]
    if positive and low <= 0:
        return [f"{kind}(low, high) needs low > 0 (it samples log(value)), got low={low!r}"]
    if integer and low > high:
        return [f"{kind}(low, high) needs low <= high, got low={low!r}, high={high!r}"]
    if not integer and low >= high:
        return [f"{kind}(low, high) needs low < high, got low={low!r}, high={high!r}"]
    return []


def _dimension_problems(dim: Any) -> list[str]:
    if isinstance(dim, Uniform):
        return _range("uniform", dim.low, dim.high)
    if isinstance(dim, LogUniform):
        return _range("loguniform", dim.low, dim.high, positive=True)
    if isinstance(dim, RandInt):
        return _range("randint", dim.low, dim.high, integer=True)
    if isinstance(dim, Choice):
        if not isinstance(dim.values, tuple) or not dim.values:
            return ["choice(values) needs at least one value"]
        try:
            encoded = [json.dumps(v, sort_keys=True, allow_nan=False) for v in dim.values]
        except (TypeError, ValueError) as error:
            return [f"choice(values) needs JSON values (they reach the pods as JSON): {error}"]
        if len(set(encoded)) != len(encoded):
            return [f"choice(values) has duplicates: {list(dim.values)!r}"]
        return []
    return [
        f"is a {type(dim).__name__}, not a dimension; use uniform(), loguniform(), randint() or choice() "
        "from airflow_elastic.sweeps"
    ]


_D = TypeVar("_D", bound=Dimension)


def _checked(dim: _D, where: str) -> _D:
    problems = _dimension_problems(dim)
    if problems:
        raise SpecError([(where, p) for p in problems])
    return dim


def uniform(low: float, high: float) -> Uniform:
    """A float uniform in ``[low, high]``. Raises ``SpecError`` unless ``low < high`` are finite numbers."""
    return _checked(Uniform(low, high), "uniform")


def loguniform(low: float, high: float) -> LogUniform:
    """A float log-uniform in ``[low, high]``. Raises ``SpecError`` unless ``0 < low < high`` are finite."""
    return _checked(LogUniform(low, high), "loguniform")


def randint(low: int, high: int) -> RandInt:
    """An integer in ``[low, high]``, both ends inclusive. Raises ``SpecError`` unless ``low <= high`` are ints."""
    return _checked(RandInt(low, high), "randint")


def choice(values: Sequence[Any]) -> Choice:
    """One of ``values`` (a non-empty list of distinct JSON values). Raises ``SpecError`` otherwise."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise SpecError([("choice", f"needs a list of values, got {type(values).__name__} {values!r}")])
    return _checked(Choice(tuple(values)), "choice")


def validate_space(space: Mapping[str, Dimension], *, algorithm: str, where: str = "space") -> None:
    """Check a whole space for ``algorithm``.

    Raises:
        SpecError: naming ``where`` (and ``where[name]``) for an empty space or one that is not a mapping, a name
            that is not a non-empty string, a value that is not a (valid) dimension, an unknown algorithm, or a
            grid over a continuous range.
    """
    problems: list[tuple[str, str]] = []
    if algorithm not in ALGORITHMS:
        problems.append(("algorithm", f"must be one of {', '.join(map(repr, ALGORITHMS))}, got {algorithm!r}"))
    if not isinstance(space, Mapping):
        raise SpecError([*problems, (where, f"must be a dict of name to dimension, got {type(space).__name__}")])
    if not space:
        problems.append((where, "is empty: give at least one dimension, e.g. {'lr': loguniform(1e-4, 1e-1)}"))
    for name, dim in space.items():
        if not isinstance(name, str) or not name:
            problems.append((f"{where}[{name!r}]", "a parameter name must be a non-empty string"))
            continue
        path = f"{where}[{name!r}]"
        problems += [(path, p) for p in _dimension_problems(dim)]
        if algorithm == "grid" and isinstance(dim, Uniform | LogUniform):
            problems.append(
                (path, "grid search needs a finite set of values: use choice([...]) or randint(), not a float range")
            )
    if problems:
        raise SpecError(problems)


def values_of(dim: Dimension) -> list[Any]:
    """The finite values of a ``randint`` or ``choice`` dimension, in order."""
    if isinstance(dim, RandInt):
        return list(range(dim.low, dim.high + 1))
    if isinstance(dim, Choice):
        return list(dim.values)
    raise TypeError(f"{dim!r} is a continuous range; it has no finite list of values")


def grid(space: Mapping[str, Dimension]) -> list[dict[str, Any]]:
    """Every combination of a finite space, in a deterministic order (the last parameter varies fastest).

    Raises:
        SpecError: the space is not valid for grid search.
    """
    validate_space(space, algorithm="grid")
    names = list(space)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(values_of(space[n]) for n in names))]


def grid_size(space: Mapping[str, Dimension]) -> int:
    """How many combinations :func:`grid` has (without building them)."""
    validate_space(space, algorithm="grid")
    return math.prod(len(values_of(dim)) for dim in space.values())


def contains(dim: Dimension, value: Any) -> bool:
    """Whether ``value`` is a value ``dim`` can take (used to check warm-start parameters against a space)."""
    if isinstance(dim, Uniform | LogUniform):
        return _is_real(value) and dim.low <= value <= dim.high
    if isinstance(dim, RandInt):
        return _is_int(value) and dim.low <= value <= dim.high
    return any(_same(value, v) for v in dim.values)


def _same(a: Any, b: Any) -> bool:
    """JSON equality (``True`` is not ``1``; ``1`` and ``1.0`` are the same number)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True) or (_is_real(a) and _is_real(b) and a == b)


def to_json(space: Mapping[str, Dimension]) -> dict[str, dict[str, Any]]:
    """A JSON-safe form of ``space``: ``{"lr": {"type": "loguniform", "low": 1e-4, "high": 0.1}, ...}``."""
    out: dict[str, dict[str, Any]] = {}
    for name, dim in space.items():
        kind = next(k for k, cls in _KINDS.items() if isinstance(dim, cls))
        out[name] = (
            {"type": kind, "values": list(dim.values)}
            if isinstance(dim, Choice)
            else {
                "type": kind,
                "low": dim.low,
                "high": dim.high,
            }
        )
    return out


def from_json(data: Mapping[str, Mapping[str, Any]]) -> dict[str, Dimension]:
    """The space :func:`to_json` wrote (dimensions validated again).

    Raises:
        SpecError: ``data`` is not such a form (naming the parameter).
    """
    if not isinstance(data, Mapping):
        raise SpecError([("space", f"must be a JSON object of name to dimension, got {type(data).__name__}")])
    space: dict[str, Dimension] = {}
    for name, item in data.items():
        kind = item.get("type") if isinstance(item, Mapping) else None
        if kind not in _KINDS:
            raise SpecError([(f"space[{name!r}]", f"unknown dimension {item!r}; types: {', '.join(_KINDS)}")])
        if kind == "choice":
            dim: Dimension = Choice(tuple(item.get("values") or ()))
        else:
            dim = _KINDS[kind](item.get("low"), item.get("high"))
        space[name] = _checked(dim, f"space[{name!r}]")
    return space
