"""Metrics (pure: imports neither Airflow nor kubernetes): the catalog of what the operators report through Airflow's
``Stats``, and how a finished training group, a sweep's trials and a batch stage's verdict become those samples."""
