"""Publishing: ``metrics.json``, model cards rendered and checked from it, and a staged, validated Hub repo."""
