"""Per-run values in a training group: map its templatable string fields with a function (pure).

The operator renders Jinja (``{{ params.steps }}``, ``{{ ds }}``) into a *copy* of the frozen spec: this module
knows which fields are templatable and rebuilds the group with ``dataclasses.replace``, which validates it again.
A rendered value that breaks a rule therefore raises :class:`~airflow_elastic.training.spec.SpecError` naming the field
(``roles[0].env: ...``), exactly as a literal value would have at parse time.

Templatable fields: ``image`` (group and role), ``command``, ``args``, ``env`` values (group and role) and
``checkpoint.uri``. Names, replicas, resources and placement are not: they shape the JobSet and its name budget,
which are checked when the DAG file is parsed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from airflow_elastic.training.spec import Role, SpecError, TrainingGroup

__all__ = ["TEMPLATE_MARKERS", "has_template", "render_group"]

#: Strings containing one of these are Jinja templates; others are left as they are.
TEMPLATE_MARKERS = ("{{", "{%", "{#")

Render = Callable[[str], Any]


def has_template(value: object) -> bool:
    """Whether ``value`` is a string with Jinja markup in it."""
    return isinstance(value, str) and any(marker in value for marker in TEMPLATE_MARKERS)


def _string(value: Any, render: Render) -> Any:
    """``render(value)`` for a templated string (the result as ``str``); anything else unchanged."""
    if not has_template(value):
        return value
    rendered = render(value)
    return rendered if isinstance(rendered, str) else str(rendered)


def _strings(values: Sequence[Any], render: Render) -> tuple[Any, ...]:
    return tuple(_string(v, render) for v in values)


def _env(env: Mapping[str, Any] | None, render: Render) -> Mapping[str, Any] | None:
    return None if env is None else {key: _string(value, render) for key, value in env.items()}


def _role(role: Role, render: Render) -> Role:
    return replace(
        role,
        image=_string(role.image, render),
        command=_strings(role.command, render),
        args=_strings(role.args, render),
        env=_env(role.env, render),
    )


def render_group(group: TrainingGroup, render: Render) -> TrainingGroup:
    """A copy of ``group`` with every templated string field passed through ``render``.

    Args:
        group: a validated training group.
        render: called with each templated string (e.g. the operator's ``self.render_template(s, context)``);
            a non-string result is converted with ``str`` (an env value must be a string).

    Returns:
        ``group`` itself when nothing is templated, else a new validated group.

    Raises:
        SpecError: a rendered value breaks a rule; each problem names the field and says the value came from a
            template.
    """
    if not _templated(group):
        return group
    checkpoint = group.checkpoint
    if checkpoint is not None and has_template(checkpoint.uri):
        checkpoint = replace(checkpoint, uri=_string(checkpoint.uri, render))
    try:
        return replace(
            group,
            image=_string(group.image, render),
            env=_env(group.env, render),
            checkpoint=checkpoint,
            roles=tuple(_role(role, render) for role in group.roles),
        )
    except SpecError as error:
        raise SpecError(
            [(path, f"{message} (after rendering templates)") for path, message in error.problems]
        ) from error


def _templated(group: TrainingGroup) -> bool:
    values: list[Any] = [group.image, *(group.env or {}).values()]
    if group.checkpoint is not None:
        values.append(group.checkpoint.uri)
    for role in group.roles:
        values += [role.image, *role.command, *role.args, *(role.env or {}).values()]
    return any(has_template(v) for v in values)
