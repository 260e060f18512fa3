"""Running turns: the job pool (APScheduler), one-turn-per-task queue, the runner, live progress."""
