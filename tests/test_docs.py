"""The README documents what the code does: every contract variable, every spot platform, both quickstart commands."""

from __future__ import annotations

from airflow_elastic import contract, platforms
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_quickstart_commands():
    assert "make demo" in README and "make test" in README


def test_every_contract_variable_is_documented():
    names = [v for k, v in vars(contract).items() if k.isupper() and isinstance(v, str) and k != "PREFIX"]
    missing = [n for n in names if f"`{n}`" not in README]
    assert not missing, f"README does not document {missing}"


def test_every_spot_platform_is_documented():
    for name, capacity in platforms.SPOT_PLATFORMS.items():
        assert f"`{name}`" in README
        for key, value in capacity.node_selector.items():
            assert f"`{key}={value}`" in README
