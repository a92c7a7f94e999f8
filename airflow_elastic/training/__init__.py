"""Training groups (pure: imports neither Airflow nor kubernetes): the typed spec and its rules, per-run templating,
which cluster controller runs a group (backends), what a group is doing as the cluster shows it (state), and the
rendering into JobSets, TrainJobs and PyTorchJobs."""
