"""A tiny HTTP server for Deployment tests: answers every GET/POST with its pod name, version and request path.

Binds ``POD_IP:PORT`` (from the environment); ``BURN_MS`` of CPU per request before answering (load an autoscaler
sees, default 0); on SIGTERM it keeps serving for ``DRAIN_SECONDS`` before exiting,
as a preStop delay gives in-flight requests through a Service time to finish."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        sent = self.rfile.read(length).decode() if length else ""
        end = time.process_time() + float(os.environ.get("BURN_MS", "0")) / 1000
        while time.process_time() < end:
            pass
        body = json.dumps(
            {
                "pod": os.environ.get("POD_NAME", ""),
                "version": os.environ.get("VERSION", ""),
                "path": self.path,
                "method": self.command,
                "body": sent,
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:  # keep the pod log quiet
        pass


def main() -> None:
    server = ThreadingHTTPServer((os.environ["POD_IP"], int(os.environ.get("PORT", "8080"))), Handler)

    def drain(*_: object) -> None:
        threading.Thread(
            target=lambda: (time.sleep(float(os.environ.get("DRAIN_SECONDS", "1"))), server.shutdown()), daemon=True
        ).start()

    signal.signal(signal.SIGTERM, drain)
    server.serve_forever(poll_interval=0.1)


if __name__ == "__main__":
    main()
