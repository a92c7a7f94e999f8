"""Sphinx configuration of the airflow-elastic docs (``make docs``): MyST Markdown pages, an API reference generated
from the docstrings, snippets included from ``dags/``."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout's package, not an installed copy
sys.path.insert(0, str(ROOT / "docs" / "_ext"))  # clihelp (the CLI page's help texts)

from airflow_elastic import __version__  # noqa: E402

project = "airflow-elastic"
author = "airflow-elastic contributors"
copyright = "airflow-elastic contributors"
version = release = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",  # the docstrings' Google style (Args:, Returns:)
    "sphinx.ext.viewcode",
    "clihelp",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}  # .rst: the generated API pages
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

# MyST: GitHub-style heading anchors (a link to a page plus #some-heading), so links work on GitHub and in the site.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]

# The API reference (api.md): one page per module, recursively from `airflow_elastic`, so it follows the code.
autosummary_generate = True
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_class_signature = "separated"
#: Packages whose internals stay out of the reference: only their public entry points (__all__) are documented.
API_INTERNALS_HIDDEN = ("airflow_elastic.localcluster",)
autosummary_context = {"internals_hidden": API_INTERNALS_HIDDEN}

html_theme = "furo"
html_title = f"airflow-elastic {release}"
