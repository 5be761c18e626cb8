"""The async shell around the pure core: every task lives here. The manager, the runner that
executes each connection's subscription actions, the per-watch tasks, the large-body worker, the
filter glue and the URI catalog. The public names are re-exported from :mod:`asyncai_watch`."""
