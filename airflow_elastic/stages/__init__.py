"""Batch stages (pure): the typed ``BatchStage`` spec, its rendering into a Job and a CronJob, and the CronJob-style
decisions (concurrency, starting deadline, history) around them."""
