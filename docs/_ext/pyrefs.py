"""Resolve an ambiguous short Python name the way the module that wrote it does.

Type hints the API reference shows as bare names (``Budgets``) come from annotations autodoc could not evaluate (a
``TYPE_CHECKING`` import elsewhere in the class), so Sphinx looks the name up across every documented module; where
two modules define it (``training.spec.Budgets`` and ``sweeps.budgets.Budgets``) it warns and links the first it found.
The namespace the annotation was written in (the referring module's, or for an inherited field its base class's
module) says which one it meant: this post-transform qualifies the reference with that, only for names Sphinx finds
more than once.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from typing import Any

from sphinx.addnodes import pending_xref
from sphinx.transforms.post_transforms import SphinxPostTransform


class QualifyAmbiguous(SphinxPostTransform):
    """Before references are resolved: ``Budgets`` -> ``airflow_elastic.training.spec.Budgets`` where ambiguous."""

    default_priority = 5  # before sphinx.transforms.post_transforms.ReferencesResolver (10)

    def run(self, **kwargs: Any) -> None:
        """Qualify each unqualified ``py`` reference that matches more than one documented object."""
        domain = self.env.domains["py"]
        for node in self.document.findall(pending_xref):
            target, module = node.get("reftarget", ""), node.get("py:module")
            if node.get("refdomain") != "py" or "." in target or not module:
                continue
            searchmode = 1 if node.hasattr("refspecific") else 0  # as the python domain resolves it
            matches = domain.find_obj(self.env, module, node.get("py:class"), target, node.get("reftype"), searchmode)
            if len(matches) < 2:
                continue
            names = {name for name, _ in matches}
            for qualified in _candidates(module, node.get("py:class"), target):
                if qualified in names:
                    node["reftarget"] = qualified
                    break


def _candidates(module: str, cls: str | None, name: str) -> Iterator[str]:
    """What ``name`` is in ``module``, then in the modules of ``module.cls``'s bases (an inherited annotation is
    written in its base's module), as ``<defining module>.<qualified name>``."""
    try:
        namespace = importlib.import_module(module)
    except ImportError:
        return
    modules = [namespace]
    owner = getattr(namespace, cls.split(".")[0], None) if cls else None
    modules += [
        sys.modules[base.__module__] for base in getattr(owner, "__mro__", ()) if base.__module__ in sys.modules
    ]
    for where in modules:
        obj = getattr(where, name, None)
        defined, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
        if defined and qualname:
            yield f"{defined}.{qualname}"


def setup(app: Any) -> dict[str, Any]:
    """Register the post-transform."""
    app.add_post_transform(QualifyAmbiguous)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
