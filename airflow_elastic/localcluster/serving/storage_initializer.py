"""The local cluster's ``storage-initializer`` init container: ``storage_initializer.py SRC DEST [SRC DEST ...]``.

Stands in for KServe's ``kserve/storage-initializer`` image
(``python/storage-initializer/scripts/initializer-entrypoint`` → ``Storage.download_files``): ``file://`` URIs and
local paths are copied into DEST, a file into DEST under its own name, a directory's contents into DEST. No object
store is reachable from here, so every other scheme (``s3://``, ``gs://``, ``https://``, ...) fails the way a pod
without credentials fails upstream: an error on stderr and exit code 1, which KServe reports as ``ModelLoadFailed``.
DEST is a mount path, found through ``LOCALCLUSTER_MOUNT_<PATH>`` (the local cluster has no mount namespace).
Standard library only.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: What the upstream storage module raises for a scheme whose credentials are missing.
_NO_CREDENTIALS = {
    "s3": "botocore.exceptions.NoCredentialsError: Unable to locate credentials",
    "gs": "google.auth.exceptions.DefaultCredentialsError: Your default credentials were not found.",
}


class DownloadError(Exception):
    """SRC cannot be copied; the message is what the container's log and termination message show."""


def mounted(path: str) -> Path:
    """Where the mount ``path`` is for this process."""
    name = "LOCALCLUSTER_MOUNT_" + (re.sub(r"[^A-Za-z0-9]", "_", path.strip("/")).upper() or "ROOT")
    return Path(os.environ.get(name, path))


def source_path(uri: str) -> Path:
    """The local file or directory a ``file://`` URI or a path names. Raises :class:`DownloadError` for others."""
    if uri.startswith("file://"):
        return Path(unquote(urlparse(uri).path))
    if _SCHEME.match(uri):
        scheme = uri.split("://", 1)[0].lower()
        reason = _NO_CREDENTIALS.get(scheme, f"no credentials for {scheme}:// storage")
        raise DownloadError(
            f"{reason} (downloading {uri}): the local cluster's storage initializer copies only file:// URIs "
            "and local paths"
        )
    return Path(uri)


def download(uri: str, dest: Path) -> list[str]:
    """Copy ``uri`` into ``dest``; the names copied."""
    src = source_path(uri)
    if not src.exists():
        raise DownloadError(f"Local path {uri} does not exist.")
    dest.mkdir(parents=True, exist_ok=True)
    if src.is_file():
        shutil.copy2(src, dest / src.name)
        return [src.name]
    for entry in src.iterdir():
        target = dest / entry.name
        if entry.is_dir():
            shutil.copytree(entry, target, dirs_exist_ok=True)
        else:
            shutil.copy2(entry, target)
    return sorted(e.name for e in src.iterdir())


def main(argv: list[str]) -> int:
    if len(argv) < 2 or len(argv) % 2:
        print("usage: storage_initializer.py SRC_URI DEST_PATH [SRC_URI DEST_PATH ...]", file=sys.stderr)
        return 2
    for uri, dest in zip(argv[::2], argv[1::2], strict=True):
        try:
            copied = download(uri, mounted(dest))
        except (DownloadError, OSError) as err:
            print(f"ERROR:kserve.storage: {err}", file=sys.stderr, flush=True)
            return 1
        print(f"INFO:kserve.storage: copied {', '.join(copied) or 'nothing'} from {uri} to {dest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
