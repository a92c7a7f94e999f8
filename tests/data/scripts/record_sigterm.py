"""A training-like process: records its pid, then on SIGTERM writes a "checkpoint" marker and exits 143.

Usage: ``record_sigterm.py DIR`` — writes ``DIR/pid`` at start and ``DIR/sigterm`` when SIGTERM arrives, so a
test can tell a graceful reclaim (marker written) from a node that vanished (process killed, no marker).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)

    def on_sigterm(signum: int, frame: object) -> None:
        (out / "sigterm").write_text(f"{time.time()}\n")
        sys.exit(143)

    signal.signal(signal.SIGTERM, on_sigterm)
    (out / "pid").write_text(str(os.getpid()))
    while True:
        time.sleep(0.1)


if __name__ == "__main__":
    main()
