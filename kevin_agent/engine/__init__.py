"""The engine: the loop over turns (``loop``) and the turn it assembles for each candidate
(``draft``), how trajectories share them (``search``), Kevin's prompts (``prompting``) and its
responses split (``parsing``). Which turn continued which and which kernel a run delivers are
read from the records (``results.lineage``, ``results.winner``)."""
