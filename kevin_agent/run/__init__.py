"""A run's life: starting or resuming one (``launch``), driving it to its end and delivering
(``finish``) and the signals that stop it (``interrupts``). What a run keeps on disk, and the lock
that gives it one owner, is ``store``."""
