"""The sweep operator's glue: one task runs every trial, its state in ``task_state_store`` across deferrals."""
