"""Running: the planned jobs in, their result.json out (fan-out, workers, locks, records)."""
