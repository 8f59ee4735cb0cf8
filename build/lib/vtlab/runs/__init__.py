"""A run's directory, as other runs and tools read it: the guard that never overwrites results and resumes an
interrupted run (directory.py), its status.json (status.py), and reusing an equal finished run (reuse.py); the run's
config values, checked before it starts (checks.py); the running Hydra job's config choices and sweep directory
(job.py)."""
