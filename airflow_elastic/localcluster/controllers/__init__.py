"""Controllers of the local cluster: garbage collection, namespaces, Jobs, JobSets, nodes and the scheduler."""
