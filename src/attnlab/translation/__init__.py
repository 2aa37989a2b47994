"""Machine translation end to end: train on parallel text, translate, inspect attention.

``train_translation`` trains a joint vocabulary and a Transformer with the shared
Trainer and writes a model directory; ``Translator`` loads one and translates plain
sentences. Scoring lives in ``attnlab.evaluation``, plots in ``attnlab.viz``.
"""

from attnlab.tasks.translation import (
    MODEL_SUBDIR,
    TASK_FILE,
    TranslationTrainOptions,
    encode_and_filter,
    load_training_corpora,
    train_translation,
    translation_loss,
)
from attnlab.translation.translator import AttentionExample, Translator

__all__ = [
    "MODEL_SUBDIR",
    "TASK_FILE",
    "AttentionExample",
    "TranslationTrainOptions",
    "Translator",
    "encode_and_filter",
    "load_training_corpora",
    "train_translation",
    "translation_loss",
]
