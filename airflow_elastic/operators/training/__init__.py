"""The training group operator's glue: submit or adopt, wait (deferred or on the worker), resubmit preempted
groups from their latest checkpoint, and the I/O for the Kubeflow backends."""
