"""A sweep trial for ``bench/sweep.py``: trains for ``BASE_SECONDS + SPREAD_SECONDS * x`` seconds (``x`` from the
trial parameters), so trials of one sweep take different times, then reports ``loss = (x - 0.3)²``."""

from __future__ import annotations

import os
import time

from airflow_elastic import runtime

x = float(runtime.context().trial_params["x"])
end = time.monotonic() + float(os.environ.get("BASE_SECONDS", "1.5")) + float(os.environ.get("SPREAD_SECONDS", "3")) * x
while time.monotonic() < end:
    time.sleep(0.05)
runtime.report({"loss": (x - 0.3) ** 2})
