"""Machine translation end to end: train on parallel text, translate, inspect attention.

The documented public path of the translation family's Python API (docs/translation.md):
``train_translation`` trains a joint vocabulary and a Transformer with the shared Trainer
and writes a model directory; ``Translator`` loads one and translates plain sentences.
The code lives in the family's package, :mod:`attnlab.families.translation` (``task``: its
training parts, ``train``: the training run; ``translator``: Translator; ``onnx``: its ONNX
graphs, and ``onnx_greedy_translate``, which decodes with the two parts ``export-onnx``
writes); this module names it and imports it on first use, through the registry's
:func:`attnlab.families.resolve`, as everything outside a family reaches into it
(tests/test_layering.py). Scoring lives in ``attnlab.evaluation``, plots
in ``attnlab.viz``.
"""

_TASK = "attnlab.families.translation.task"
_TRAIN = "attnlab.families.translation.train"
_TRANSLATOR = "attnlab.families.translation.translator"
_ONNX = "attnlab.families.translation.onnx"
_WHERE = {
    "MODEL_SUBDIR": _TASK,
    "TASK_FILE": _TASK,
    "TranslationTrainOptions": _TASK,
    "encode_and_filter": _TASK,
    "load_training_corpora": _TASK,
    "train_translation": _TRAIN,
    "translation_loss": _TASK,
    "AttentionExample": _TRANSLATOR,
    "Translator": _TRANSLATOR,
    "onnx_greedy_translate": _ONNX,
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        from attnlab.families import resolve

        return resolve(f"{_WHERE[name]}:{name}")
    raise AttributeError(f"module 'attnlab.translation' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_WHERE])
