"""Course helpers, not the library: widgets, plots, the wellness demo domain, evaluation metrics."""
