"""The module paths of releases before the domain packages, kept importable.

Airflow stores an operator's and a trigger's class path, DAG files import what the README of their day showed, and
both must keep working after an upgrade: importing an old path below yields the module that now holds its code (the
same module object, so a ``mock.patch`` or ``isinstance`` through either path sees the same thing). New code uses the
new paths; ``docs/architecture.md`` lists both.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence

_A = "airflow_elastic"

#: Old module path (relative to the package) -> where its code lives now.
MOVED: dict[str, str] = {
    "checkpoints": "contract.checkpoints",
    "sweeps.markers": "contract.markers",
    "names": "kube.names",
    "platforms": "kube.platforms",
    "schemas": "kube.schemas",
    "render": "training.render",
    "render.schema": "kube.schema",
    **{
        f"render.{n}": f"training.render.{n}"
        for n in ("jobset", "pod", "merge", "elastic", "manifest", "compact", "trainjob", "pytorchjob", "trial")
    },
    "render.job": "stages.job",
    "render.cronjob": "stages.cronjob",
    **{n: f"training.{n}" for n in ("spec", "validation", "templating", "backends", "state")},
    **{n: f"preemption.{n}" for n in ("classify", "evidence", "cascade", "saved")},
    "operators.attempts": "preemption.attempts",
    **{
        n: f"waiting.{n}"
        for n in ("watch", "logcursor", "logfollow", "backend_views", "backend_watch", "outage", "trigger_output")
    },
    "stage": "stages.spec",
    "rollout": "serving.rollout",
    "rollout_knative": "serving.knative",
    "publishing": "serving.publishing",
    "links": "operators.links",
    **{
        f"operators.{n}": f"operators.training.{n}"
        for n in ("training_group", "resubmission", "backend_io", "checkpoint_storage", "waiting")
    },
    "operators.batch_stage": "operators.stages.batch_stage",
    "operators.cronjob": "operators.stages.cronjob",
    "operators.stage_cron": "operators.stages.cron",
    "operators.stage_waiting": "operators.stages.waiting",
    "operators.inference_service": "operators.serving.inference_service",
    "operators.rollout_waiting": "operators.serving.waiting",
    **{f"sweeps.{n}": f"operators.sweeps.{n}" for n in ("operator", "run", "outcome", "trial_groups")},
}

#: Names an old package re-exported that now live in another domain (old ``airflow_elastic.render`` rendered Jobs).
EXTRA_NAMES: dict[str, dict[str, str]] = {"render": {"render_job": "stages.job"}}


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str, extra: dict[str, str]) -> None:
        self.target = target
        self.extra = extra
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(self.target)
        if not self.extra:
            # The import system sets ``__spec__`` on whatever this returns; exec_module puts the real one back
            # (``importlib.resources`` and ``pkgutil`` read a package's search path from it).
            self.spec = module.__spec__
            return module
        # A package whose names came from two places: a view of the new package plus the names that moved away.
        view = types.ModuleType(spec.name, module.__doc__)
        extra = self.extra

        def __getattr__(name: str) -> object:
            if name in extra:
                return getattr(importlib.import_module(f"{_A}.{extra[name]}"), name)
            return getattr(module, name)

        view.__getattr__ = __getattr__  # type: ignore[method-assign]
        view.__path__ = list(getattr(module, "__path__", []))
        return view

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the module was imported under its new path; only its own spec is restored."""
        if not self.extra:
            module.__spec__ = self.spec


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        old = fullname.removeprefix(f"{_A}.")
        if old == fullname or old not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(f"{_A}.{MOVED[old]}", EXTRA_NAMES.get(old, {})))


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (the package's ``__init__`` calls it)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        # First, before the path finder: a submodule of an old package path must resolve to the module already
        # imported under its new path, never be loaded a second time from the old package's search path.
        sys.meta_path.insert(0, _Finder())
