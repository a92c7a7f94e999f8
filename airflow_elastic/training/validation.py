"""The rules a :class:`~airflow_elastic.training.spec.TrainingGroup` must satisfy (pure).

Each rule is a small generator registered under a name in :data:`RULES`; it yields ``(field_path, message)``
for every violation it finds. :func:`validate` runs them all and raises one :class:`SpecError` listing every
problem. Tests disable rules one at a time to prove each is needed. The rules live in :mod:`.role_rules` (the
group's shape, roles and resources) and :mod:`.policy_rules` (policies, placement, checkpointing, elasticity, env,
pod overrides); what they share in :mod:`.rulebook`.
"""

from __future__ import annotations

from decimal import InvalidOperation

from airflow_elastic.training import policy_rules, role_rules
from airflow_elastic.training.rulebook import (
    TRAINER_CONTAINER,
    Problem,
    Rule,
    Rules,
    is_label_key,
    is_label_value,
    parse_quantity,
)
from airflow_elastic.training.spec import CHECKS, SpecError, TrainingGroup

__all__ = [
    "RULES",
    "TRAINER_CONTAINER",
    "Problem",
    "Rule",
    "is_label_key",
    "is_label_value",
    "parse_quantity",
    "rule",
    "validate",
]

#: Every rule, in the order they run.
RULES = Rules({**role_rules.RULES, **policy_rules.RULES})
rule = RULES.rule


def validate(group: TrainingGroup) -> None:
    """Run every rule; raise :class:`SpecError` with all problems found.

    A rule that crashes on a shape an earlier rule already reported is skipped (its input is known bad).
    """
    problems: list[Problem] = []
    for check in RULES.values():
        try:
            problems.extend(check(group))
        except (TypeError, AttributeError, LookupError, ValueError, InvalidOperation):
            if not problems:
                raise
    if problems:
        raise SpecError(problems)


CHECKS.append(validate)
