"""Opening a language model directory (``attnlab train lm``): the model and its tokenizer.

Shared by the lm family (its verbs and pipeline, :mod:`attnlab.families.lm`) and the core
that serves every family (the explorer's LM source); what is only the language models'
task lives in the family package (:mod:`attnlab.families.lm.task`).
"""

from __future__ import annotations

__all__ = ["load_language_model"]


def load_language_model(directory, *, device: str = "cpu", name: str | None = None):
    """``(model, tokenizer)`` of a language model directory (``attnlab train lm``, or a
    HuggingFace GPT-2 directory): what generate, evaluate-lm, the explorer and ``attnlab.load`` open. ValueError naming
    ``name`` (default: the directory) for another family's model, a missing tokenizer or a
    tokenizer larger than the model's vocabulary."""
    from attnlab.data.text import load_lm_tokenizer
    from attnlab.interop.hf_gpt2 import is_hf_gpt2_directory, load_hf_gpt2
    from attnlab.models.registry import load_model

    name = name or str(directory)
    if is_hf_gpt2_directory(directory):  # a HuggingFace GPT-2 directory: weights converted, its byte-level BPE
        try:
            return load_hf_gpt2(directory, device=device)
        except ImportError:
            raise ValueError(f"{name}: a HuggingFace GPT-2 directory needs the tokenizers package for its "
                             "byte-level BPE (pip install tokenizers)") from None
    model = load_model(directory, device=device)
    family = model.config.family
    if family != "decoder_lm":
        from attnlab.families import used_with

        raise ValueError(f"{name}: holds a {family!r} model, not a language model ('decoder_lm', from attnlab train "
                         "lm)" + used_with(family)
                         + "; `attnlab evaluate --model DIR` and `attnlab.load(DIR)` open any family")
    try:
        tokenizer = load_lm_tokenizer(directory)
    except FileNotFoundError as error:
        raise ValueError(f"{name}: {error}") from None
    if tokenizer.vocab_size > model.config.vocab_size:
        raise ValueError(f"{name}: the tokenizer has {tokenizer.vocab_size} tokens, but the model's vocabulary is "
                         f"{model.config.vocab_size}")
    return model, tokenizer
