"""The batch stage operators' glue: a stage as one Job with CronJob semantics, or its schedule as a CronJob."""
