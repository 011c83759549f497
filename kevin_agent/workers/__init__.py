"""Worker processes: starting, talking to, clocking and reaping a child process."""
