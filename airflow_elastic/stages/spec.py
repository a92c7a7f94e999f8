"""The typed description of a batch stage: one Kubernetes Job (pure: imports neither Airflow nor kubernetes).

A :class:`BatchStage` sits beside :class:`~airflow_elastic.training.spec.TrainingGroup`: a nightly step (prepare data,
evaluate, export) that runs as a batch/v1 Job, one pod or an Indexed set of ``completions`` pods. It reuses
:class:`~airflow_elastic.training.spec.Resources` and :class:`~airflow_elastic.training.spec.Placement`, validates
itself when it is
constructed, and raises :class:`~airflow_elastic.training.spec.SpecError` naming each broken field
(``placement.tolerations[0]``), so a bad stage fails when the DAG file is parsed.

The container, resource, placement, env and ``pod_overrides`` rules are the training group's own
(:mod:`airflow_elastic.training.validation`), run on the stage's one pod; the rules below are the Job's.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import InvalidOperation
from typing import Any

from airflow_elastic.kube import names
from airflow_elastic.training import rulebook
from airflow_elastic.training.spec import Placement, Resources, Role, SpecError, _Spec

__all__ = ["BatchStage", "render_stage"]

Problem = tuple[str, str]

#: The training-group rules that judge one pod; they run on the stage as a one-role view.
POD_RULES = ("command-args", *rulebook.POD_RULES, "overrides-shape", "overrides-owned")


@dataclass(frozen=True)
class BatchStage(_Spec):
    """A batch step run as one Kubernetes Job (CPU pools, low priority, CronJob-style semantics in the operator).

    Args:
        name: DNS-1035 label; each run's Job is named ``<name>-<6 chars>``, so at most 56 characters (fewer for an
            Indexed Job, whose pod hostnames are ``<job>-<index>``).
        image: the container image.
        command: container entrypoint as a list of strings (Jinja is rendered per run by the operator).
        args: container arguments (templated too).
        env: extra environment variables (templated values; names owned by airflow-elastic are refused).
        resources: per-pod :class:`~airflow_elastic.training.spec.Resources`.
        placement: where the pods run (node selector, tolerations, priority class, optional Kueue queue); exclusive
            topology is a JobSet feature and refused here.
        parallelism: pods running at once (at most ``completions``).
        completions: pods that must succeed; more than 1 makes an Indexed Job (each pod's ``AE_RANK`` is its
            completion index, ``AE_WORLD_SIZE`` is ``completions``).
        backoff_limit: failed pods the Job retries before it fails (a pod disrupted by eviction, preemption or node
            loss is retried without counting). Default 0: a failure fails the task at once and Airflow's
            ``retries`` apply.
        active_deadline: seconds (or a ``timedelta``) the Job may run before the cluster fails it
            (``DeadlineExceeded``).
        ttl_after_finished: seconds (or a ``timedelta``) after which the cluster deletes the finished Job and its
            pods.
        pod_overrides: partial pod (``{"metadata": ..., "spec": ...}``) merged into the pod template (volumes,
            service account, ...).

    Raises:
        SpecError: listing every broken rule with its field path.
    """

    name: str
    image: str
    command: Sequence[str] = ()
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = None
    resources: Resources | None = None
    placement: Placement = field(default_factory=Placement)
    parallelism: int = 1
    completions: int = 1
    backoff_limit: int = 0
    active_deadline: float | datetime.timedelta | None = None
    ttl_after_finished: float | datetime.timedelta | None = None
    pod_overrides: Mapping[str, Any] | None = None

    _tuples = ("command", "args")
    _dicts = ("env", "pod_overrides")

    def __post_init__(self) -> None:
        super().__post_init__()
        for attr in ("active_deadline", "ttl_after_finished"):
            value = getattr(self, attr)
            if isinstance(value, datetime.timedelta):
                object.__setattr__(self, attr, value.total_seconds())
        problems = list(_problems(self))
        if problems:
            raise SpecError(problems)

    @property
    def indexed(self) -> bool:
        """Whether the Job is Indexed (``completions > 1``): each pod knows its completion index."""
        return self.completions > 1

    def with_changes(self, **changes: Any) -> BatchStage:
        """A validated copy with some fields replaced (``dataclasses.replace``)."""
        return replace(self, **changes)


# ------------------------------------------------------------------------------------------------- rules


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _problems(stage: BatchStage) -> Iterator[Problem]:
    """Every broken rule: the Job's own first, then the pod rules (skipped when the types are already wrong)."""
    typed = list(_types(stage))
    yield from typed
    yield from _name(stage)
    yield from _image(stage)
    yield from _counts(stage)
    yield from _durations(stage)
    if typed:
        return
    if stage.placement.exclusive_topology is not None:
        yield "placement.exclusive_topology", "is a JobSet feature; a batch stage's pods are placed one by one"
    yield from _pod_problems(stage)


def _types(stage: BatchStage) -> Iterator[Problem]:
    if not isinstance(stage.resources, Resources | None):
        yield "resources", f"expected Resources or None, got {type(stage.resources).__name__}"
    if not isinstance(stage.placement, Placement):
        yield "placement", f"expected Placement, got {type(stage.placement).__name__}"


def _name(stage: BatchStage) -> Iterator[Problem]:
    if not names.is_dns1035_label(stage.name):
        yield "name", f"{stage.name!r} must be a DNS-1035 label (lowercase letters, digits, '-'; starts with a letter)"
        return
    job = names.run_name_length(stage.name)
    completions = stage.completions if _is_int(stage.completions) and stage.completions > 1 else 0
    # Upstream sets an Indexed pod's hostname to <job>-<index>: a DNS label, so at most 63 characters.
    longest = job + (1 + len(str(completions - 1)) if completions else 0)
    if longest > names.MAX_LABEL:
        what = f"its pod hostnames <job>-{completions - 1}" if completions else "the Job name <name>-<6 chars>"
        yield (
            "name",
            f"{stage.name!r} is too long: {what} would have {longest} characters, over {names.MAX_LABEL}; shorten it",
        )


def _image(stage: BatchStage) -> Iterator[Problem]:
    if not isinstance(stage.image, str) or not stage.image.strip():
        yield "image", f"must be a non-empty string, got {stage.image!r}"


def _counts(stage: BatchStage) -> Iterator[Problem]:
    for attr in ("parallelism", "completions"):
        value = getattr(stage, attr)
        if not _is_int(value) or value < 1:
            yield attr, f"must be a positive integer, got {value!r}"
    if _is_int(stage.parallelism) and _is_int(stage.completions) and stage.parallelism > stage.completions:
        yield (
            "parallelism",
            f"{stage.parallelism} is more than completions={stage.completions}: the Job would never run that many pods",
        )
    if not _is_int(stage.backoff_limit) or stage.backoff_limit < 0:
        yield "backoff_limit", f"must be an integer >= 0, got {stage.backoff_limit!r}"


def _durations(stage: BatchStage) -> Iterator[Problem]:
    for attr, low in (("active_deadline", 1), ("ttl_after_finished", 0)):
        value = getattr(stage, attr)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value < 2**31:
            yield attr, f"must be whole seconds >= {low} (or a timedelta), got {value!r}"
        elif value != int(value):
            yield attr, f"must be whole seconds (the Job field is an integer), got {value!r}"


@dataclass(frozen=True)
class _OnePod:
    """The stage as a one-role group, for the training group's pod rules (paths come out as the stage's)."""

    role: Role
    placement: Placement
    image: None = None
    env: None = None
    pod_overrides: None = None

    @property
    def roles(self) -> tuple[Role, ...]:
        return (self.role,)

    def image_of(self, role: Role) -> str | None:
        return role.image

    def placement_of(self, role: Role) -> Placement:
        return self.placement


def _pod_problems(stage: BatchStage) -> Iterator[Problem]:
    from airflow_elastic.training.validation import RULES

    role = Role(
        name=stage.name,
        command=stage.command,
        args=stage.args,
        image=stage.image,
        resources=stage.resources,
        env=stage.env,
        pod_overrides=stage.pod_overrides,
    )
    view: Any = _OnePod(role, stage.placement)
    found: list[Problem] = []
    for name in POD_RULES:
        try:
            found.extend(RULES[name](view))
        except (TypeError, AttributeError, LookupError, ValueError, InvalidOperation):
            if not found:
                raise
    for path, message in found:
        yield path.removeprefix("roles[0]."), message


def render_stage(stage: BatchStage, render: Callable[[str], Any]) -> BatchStage:
    """A copy of ``stage`` with each templated string of ``image``, ``command``, ``args`` and ``env`` values passed
    through ``render`` (the operator's Jinja); ``stage`` itself when nothing is templated.

    Raises:
        SpecError: a rendered value breaks a rule (the message says it came from a template).
    """
    from airflow_elastic.training.templating import _env, _string, _strings, has_template

    values = [stage.image, *stage.command, *stage.args, *(stage.env or {}).values()]
    if not any(has_template(v) for v in values):
        return stage
    try:
        return replace(
            stage,
            image=_string(stage.image, render),
            command=_strings(stage.command, render),
            args=_strings(stage.args, render),
            env=_env(stage.env, render),
        )
    except SpecError as error:
        raise SpecError(
            [(path, f"{message} (after rendering templates)") for path, message in error.problems]
        ) from error
