"""A run's life: starting or resuming one (``launch``), driving it to its end and delivering
(``finish``), signals (``interrupts``), the one owner it has at a time (``runlock``) and what it
keeps on disk (``store``)."""
