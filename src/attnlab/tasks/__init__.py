"""Tasks: what a model family is trained on (data -> batches -> loss -> Trainer -> model directory)."""
