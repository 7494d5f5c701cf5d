"""What an operator reads, shaped once for the CLI, the dashboard and metrics, from the
``Inspector`` alone: ``records`` (queues, workers, schedules, jobs and batches as JSON),
``failures`` (a batch's failures and their retry), ``search`` (bounded search of jobs),
``history`` (the last day's outcomes per minute) and ``reseal`` (stored jobs sealed again with
the newest key)."""
