"""What the training-group rules share: their registry, Kubernetes quantity and label checks, and walks over a
group's roles and placements (pure)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from typing import Any

from airflow_elastic.kube import names
from airflow_elastic.training.spec import Placement, Role, TrainingGroup

Problem = tuple[str, str]
Rule = Callable[[TrainingGroup], Iterator[Problem]]

#: The training container's name in every rendered pod; ``pod_overrides`` address it by this name.
TRAINER_CONTAINER = "trainer"

_QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")
_SUFFIX = {
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1)},
    **{s: Decimal(1000) ** (i + 1) for i, s in enumerate(("k", "M", "G", "T", "P", "E"))},
}
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class Rules(dict[str, Rule]):
    """Rules by name, in registration order (the order they run in)."""

    def rule(self, name: str) -> Callable[[Rule], Rule]:
        """A decorator registering a rule under ``name``."""

        def register(fn: Rule) -> Rule:
            self[name] = fn
            return fn

        return register


#: The registered rules that judge one pod's resources, placement and env: what a batch stage and the pods of a Ray
#: cluster, each seen as a group of one-pod roles, are checked with.
POD_RULES = (
    "quantities",
    "limits",
    "gpu",
    "gpu-vendor",
    "extended-resources",
    "spot-platform",
    "node-selector",
    "spot-selector",
    "tolerations",
    "priority-class",
    "env",
)


def parse_quantity(value: object) -> Decimal | None:
    """The numeric value of a Kubernetes quantity (``"1.5Gi"``, ``"500m"``, ``2``), or None if malformed."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    text = str(value)
    match = _QUANTITY.match(text)
    if not match:
        return None
    suffix = match.group(3) or ""
    number = Decimal(text[: len(text) - len(suffix)])
    if suffix[:1] in ("e", "E"):
        return number * Decimal(10) ** int(suffix[1:])
    return number * _SUFFIX[suffix]


def is_label_key(key: object) -> bool:
    """Whether ``key`` is a label key the API server accepts: an optional DNS-1123 subdomain prefix of at most 253
    characters and ``/``, then a name of 1 to 63 alphanumerics, ``-``, ``_`` or ``.``, alphanumeric at both ends."""
    if not isinstance(key, str) or not key:
        return False
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= names.MAX_LABEL and bool(_LABEL_NAME.match(name))


def is_label_value(value: object) -> bool:
    """Whether ``value`` is a label value the API server accepts: a string, empty or shaped like a key's name."""
    return isinstance(value, str) and len(value) <= names.MAX_LABEL and bool(_LABEL_NAME.match(value))


def is_int(value: object) -> bool:
    """Whether ``value`` is an integer; ``True`` and ``False`` are not, though Python counts them as ints."""
    return isinstance(value, int) and not isinstance(value, bool)


def roles_of(group: TrainingGroup) -> Iterator[tuple[str, Role]]:
    """The group's roles with their paths (``roles[i]``), skipping entries that are not a :class:`Role`: the
    ``roles`` rule reports those, and the rules that walk roles can read their fields."""
    for i, role in enumerate(group.roles):
        if isinstance(role, Role):
            yield f"roles[{i}]", role


def placements_of(group: TrainingGroup) -> Iterator[tuple[str, Placement]]:
    """The group's placement and each role's own placement (where it replaces the group's), with paths."""
    yield "placement", group.placement
    for path, role in roles_of(group):
        if role.placement is not None:
            yield f"{path}.placement", role.placement


def group_and_roles(group: TrainingGroup, attr: str) -> Iterator[tuple[str, Any]]:
    """The field ``attr`` that both the group and its roles have (``env``, ``pod_overrides``), with paths."""
    yield attr, getattr(group, attr)
    for path, role in roles_of(group):
        yield f"{path}.{attr}", getattr(role, attr)


def role_names_of(group: TrainingGroup) -> list[str]:
    """The names of the group's roles (of :func:`roles_of`), in order, to check names and references to roles."""
    return [role.name for _, role in roles_of(group)]


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """A ``" (did you mean 'x'?)"`` suffix naming the one of ``choices`` closest to ``word``, or ``""`` if none
    is close."""
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def quoted(items: Sequence[str]) -> str:
    """``items`` as their reprs separated by commas, for messages that list the accepted values."""
    return ", ".join(repr(i) for i in items)
