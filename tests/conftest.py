from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"

#: Tests that need the machine to themselves, and why. ``make test`` runs the rest on two pytest-xdist workers
#: (``-m "not serial"``), then these alone (``-m serial``); they are marked here, by file, so the list is one place.
SERIAL = {
    # A real scheduler and triggerer whose heartbeat timeouts are a few seconds: a starved worker would be a zombie.
    "tests/airflow/test_real_processes.py": "real Airflow components with second-scale heartbeat timeouts",
    # The whole nightly pipeline twice under real Airflow components: minutes of CPU, and the defer race it guards
    # against depends on timing.
    "tests/airflow/test_nightly_deployment.py": "real Airflow components running the flagship DAG twice",
    # A benchmark: its goodput figures mean something only when nothing else competes for the CPU.
    "tests/airflow/test_goodput_bench.py": "a benchmark",
}
#: Under pytest-xdist (``--dist loadfile --no-loadscope-reorder``) these long files are handed out first, so no
#: worker starts one of them while the other has nothing left to do.
FIRST = ("tests/test_demo.py", "tests/test_packaging.py")


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.relative_to(ROOT).as_posix() in SERIAL:
            item.add_marker(pytest.mark.serial)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker collects alike, so the order is the same in each
        items.sort(key=lambda item: item.path.relative_to(ROOT).as_posix() not in FIRST)  # stable: else as collected


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under pytest-xdist a serial test fails at once, saying so, rather than run starved beside others."""
    if item.get_closest_marker("serial") and os.environ.get("PYTEST_XDIST_WORKER"):
        path = item.path.relative_to(ROOT).as_posix()
        pytest.fail(
            f"{path} must not run beside other tests ({SERIAL.get(path, 'marked serial')}): "
            'run it without -n, or deselect it with -m "not serial" (as `make test` does)',
            pytrace=False,
        )


@pytest.fixture
def root() -> Path:
    return ROOT
