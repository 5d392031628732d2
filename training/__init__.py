"""Training scripts (not installed with ctxir): run from a checkout's root as ``python training/<script>.py`` or
``python -m training.<script>``."""
