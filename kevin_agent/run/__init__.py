"""A run's life: starting or resuming one (``launch``), the one sequence every front end follows
(``session``: open, drive, plan, deliver, close), how it ends (``finish``) and the signals that
stop it (``interrupts``). What a run keeps on disk, and the lock that gives it one owner, is
``store``."""
