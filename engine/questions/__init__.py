"""The read side: a job's events, audits and lateness, straight from the log or the history index."""
