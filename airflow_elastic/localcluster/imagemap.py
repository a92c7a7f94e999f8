"""``--image-map`` for ``airflow-elastic cluster up``: which local command stands for an image's entrypoint.

Each value is a file (YAML or JSON: ``{image: command}``) or one ``IMAGE=COMMAND`` pair; a command is a list or a
shell-style string. Containers run in their own working directories, so a relative path in a command that names
an existing file (relative to the map file's directory, or to the current directory for a pair) is made absolute.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from airflow_elastic.localcluster.cluster import ClusterError


class ImageMapError(ClusterError):
    """An ``--image-map`` value that is neither a readable map file nor an ``IMAGE=COMMAND`` pair."""


def _command(image: str, command: Any, base: Path, where: str) -> list[str]:
    argv = shlex.split(command) if isinstance(command, str) else command
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a for a in argv):
        raise ImageMapError(f"{where}: the command for image {image!r} must be a non-empty string or list of strings")
    return [str((base / a).resolve()) if not Path(a).is_absolute() and (base / a).is_file() else a for a in argv]


def _from_file(path: Path) -> dict[str, list[str]]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ImageMapError(f"image map {path}: {err}") from err
    if not isinstance(data, dict) or not all(isinstance(k, str) and k for k in data):
        raise ImageMapError(f"image map {path}: must map image names to commands (YAML or JSON object)")
    return {image: _command(image, command, path.parent, f"image map {path}") for image, command in data.items()}


def parse_image_map(values: list[str], cwd: Path) -> dict[str, list[str]]:
    """The image map that ``values`` (files or ``IMAGE=COMMAND`` pairs, later ones winning) describe.

    Raises:
        ImageMapError: a value is neither an existing file nor a pair, or a command is empty.
    """
    mapping: dict[str, list[str]] = {}
    for value in values:
        path = cwd / value
        if path.is_file():
            mapping |= _from_file(path)
            continue
        image, sep, command = value.partition("=")
        if not sep or not image:
            raise ImageMapError(
                f"--image-map {value!r}: not a file and not IMAGE=COMMAND "
                '(e.g. --image-map my/trainer:1="python train.py" or --image-map images.yaml)'
            )
        mapping[image] = _command(image, command, cwd, f"--image-map {value!r}")
    return mapping
