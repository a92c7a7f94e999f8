"""Resource quantities (``resource.Quantity``) and what a pod asks for: parsing and formatting quantities, a pod's
effective requests and its QoS class. Shared by the scheduler, the kubelet, the autoscaler and the trainer."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from airflow_elastic.localcluster.store import Obj

_SUFFIX = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")
_DECIMAL = ("n", "u", "m", "", "k", "M", "G", "T", "P", "E")


def quantity(value: Any) -> Fraction:
    """A resource.Quantity (``500m``, ``2Gi``, ``1e3``, ``4``) as an exact number."""
    text = str(value).strip()
    m = _QUANTITY.match(text)
    if not m:
        raise ValueError(f"quantities must match the regular expression: {text!r}")
    number = Fraction(m.group(1))
    if m.group(2):
        return number * Fraction(10) ** int(m.group(2)[1:])
    return number * _SUFFIX[m.group(3) or ""]


def pod_requests(pod: Obj) -> dict[str, Fraction]:
    """Effective requests: sum over containers, at least each init container's, plus overhead.

    A container that sets only a limit requests that limit (the API server's defaulting).
    """

    def of(container: Obj) -> dict[str, Fraction]:
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return {k: quantity(v) for k, v in merged.items()}

    spec = pod.get("spec") or {}
    total: dict[str, Fraction] = {}
    for container in spec.get("containers") or []:
        for k, v in of(container).items():
            total[k] = total.get(k, Fraction(0)) + v
    for container in spec.get("initContainers") or []:
        for k, v in of(container).items():
            total[k] = max(total.get(k, Fraction(0)), v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, Fraction(0)) + quantity(v)
    return total


def decimal_quantity(amount: int, suffix: str) -> str:
    """A ``DecimalSI`` quantity's canonical string, from ``amount`` in units of ``suffix`` (``n``, ``m``...): the
    largest suffix that keeps an integer, as ``resource.Quantity.String()`` writes it (``12345n``, ``5m``, ``2``)."""
    if amount == 0:
        return "0"
    index = _DECIMAL.index(suffix)
    while index < len(_DECIMAL) - 1 and amount % 1000 == 0:
        amount //= 1000
        index += 1
    return f"{amount}{_DECIMAL[index]}"


def qos_class(pod: Obj) -> str:
    """Guaranteed (cpu and memory limits == requests everywhere), BestEffort (nothing set), else Burstable."""
    spec = pod.get("spec") or {}
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    any_set, guaranteed = False, True
    for container in containers:
        res = container.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        if {"cpu", "memory"} & (set(limits) | set(requests)):
            any_set = True
        for name in ("cpu", "memory"):
            if name not in limits or quantity(requests.get(name, limits[name])) != quantity(limits[name]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"
