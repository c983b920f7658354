"""`mpskern tune`, the tool: search an op's kernel configurations on a GPU backend and store
the fastest correct one in the tuning database (mpskern/tuning/db.py), which dispatch then
consults. Beside bench and selftest; the GPU path never imports it.

    tune.py      the flow: the lookup a call makes, the candidates, the search, the entry
    search.py    the timed search over a configuration space (budget, pruning, the check)
"""
