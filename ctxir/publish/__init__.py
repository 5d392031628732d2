"""Publishing: ``metrics.json`` (metrics_file), model cards rendered and checked from it (cards), a training output
staged, validated (staging, standalone) and uploaded to the Hugging Face Hub (hub: ``ctxir hub``)."""
