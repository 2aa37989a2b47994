"""Training tasks: what ties data, a model family, a loss and the Trainer together.

Each CLI training verb is a thin shell over one module here; the next tasks
(classification, image generation, music, captioning) get a module beside these.

* :mod:`attnlab.tasks.translation` — parallel corpora -> joint vocabulary -> Transformer.
* :mod:`attnlab.tasks.lm` — plain text -> character or BPE tokens -> DecoderLM windows.
* :mod:`attnlab.tasks.classification` — images -> shifted batches -> Vision Transformer.

Modules are imported on use (``from attnlab.tasks.lm import lm_loss``): a task pulls in its
data and model code, which a CLI's ``--help`` should not pay for.
"""
