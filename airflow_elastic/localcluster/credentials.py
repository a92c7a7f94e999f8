"""A state directory's credentials: its bearer token and the kubeconfig that carries it (owner-only files).

:mod:`.serve` creates them when the server starts; :func:`expire_token` replaces the token (the
``/debug/faults/expire-token`` fault), so clients must reload their credentials.
"""

from __future__ import annotations

import base64
import os
import secrets
from pathlib import Path
from typing import Any

import yaml

CONTEXT = "airflow-elastic-local"
TOKEN_FILE = "token"
KUBECONFIG_FILE = "kubeconfig"


def token(state_dir: Path) -> str:
    """The directory's bearer token (created once, so kubeconfigs stay valid across restarts)."""
    path = state_dir / TOKEN_FILE
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32))
    return path.read_text().strip()


def kubeconfig(url: str, bearer: str, ca: bytes) -> dict[str, Any]:
    cluster = {"server": url, "certificate-authority-data": base64.b64encode(ca).decode()}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": cluster}],
        "users": [{"name": CONTEXT, "user": {"token": bearer}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": "default"}}],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write_private(path: Path, text: str) -> None:
    """Write atomically, readable by the owner only (the file holds the token)."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    tmp.replace(path)


def expire_token(state_dir: Path) -> str:
    """A new bearer token for the cluster, written to ``token`` and into the kubeconfig."""
    new = secrets.token_urlsafe(32)
    write_private(state_dir / TOKEN_FILE, new)
    path = state_dir / KUBECONFIG_FILE
    if path.exists():
        config = yaml.safe_load(path.read_text())
        for user in config.get("users") or []:
            user["user"]["token"] = new
        write_private(path, yaml.safe_dump(config, sort_keys=False))
    return new
