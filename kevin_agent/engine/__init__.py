"""The engine: the loop over turns (``loop``) and the turn it assembles for each candidate
(``draft``), how trajectories share them (``search``), Kevin's
prompts (``prompting``) and its responses split (``parsing``), which turn continued which
(``lineage``), and which kernels a run confirms and delivers (``confirmation``)."""
