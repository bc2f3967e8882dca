"""Studies: the code scenarios share to run protocols on networks, over folds and grids, and
turn ledgers into cost tables. This layer creates networks; protocols never do."""
