"""Lineage (pure: imports neither Airflow nor kubernetes): what a training group or a batch stage read and wrote, as
OpenLineage datasets (:mod:`airflow_elastic.lineage.datasets`). The operators wrap these decisions into the
OpenLineage provider's objects when it is installed (docs/concepts/lineage.md)."""
