"""Helpers shared by the tests (builders, fakes, waiting, clusters, Airflow runs); test modules import from here,
never from one another. Fixtures live in ``tests/conftest.py``."""
