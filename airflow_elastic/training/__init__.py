"""Training groups (pure: imports neither Airflow nor kubernetes): the typed spec and its rules, per-run templating,
which cluster controller runs a group (backends), what a group is doing as the cluster shows it (state), and the
rendering into JobSets, TrainJobs and PyTorchJobs."""

# A group validates itself on construction through ``spec.CHECKS``; importing the rules here installs them before
# any ``airflow_elastic.training`` module (``spec`` included) can be used.
from airflow_elastic.training import validation as _validation  # noqa: F401
