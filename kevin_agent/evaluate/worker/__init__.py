"""What runs inside a worker process: the entry point (``main``), the task's code, the candidate's
checks and timing, the confirmation's rounds, the guards. Every module here imports torch."""
