"""``{cli-help} render`` / ``{cli-help} cluster up``: the ``--help`` text of an ``airflow-elastic`` command, read from
the parser at build time, so the CLI page cannot drift from ``airflow_elastic.cli``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


def command_help(words: list[str]) -> str:
    """The help of ``airflow-elastic <words...>`` (no words: the top level), 100 columns wide."""
    from airflow_elastic.cli import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal's width: fixed, so builds are reproducible
    parser = build_parser()
    for word in words:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = actions[0].choices[word]
    return parser.format_help()


class CliHelp(SphinxDirective):
    """The ``cli-help`` directive: the ``--help`` of the command its argument names (none: the top level)."""

    optional_arguments = 1
    final_argument_whitespace = True

    def run(self) -> list[nodes.Node]:
        """The help text as a ``text`` literal block, with the builder's home directory shown as ``~``."""
        text = command_help(self.arguments[0].split() if self.arguments else [])
        text = text.replace(str(Path.home()), "~")  # the reader's home, not the builder's
        return [nodes.literal_block(text, text, language="text")]


def setup(app: Sphinx) -> dict[str, object]:
    """Register the ``cli-help`` directive; it keeps no state, so parallel reads and writes are safe."""
    app.add_directive("cli-help", CliHelp)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
