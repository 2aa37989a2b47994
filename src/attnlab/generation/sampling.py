"""Generation for decoder-only language models: greedy, temperature, top-k, top-p.

``generate(model, prompts, ...)`` continues a batch of token-id prompts of different
lengths. Prompts are left-padded into one batch; each row's positions are counted from its
own first token and padding keys are masked, so a row generates exactly what it would
generate alone (tested). The prompt runs once through the model ("prefill") into a
preallocated :class:`~attnlab.attention.cache.StaticKVCache`; every new token then costs one
``model.step`` (the model's own layers, no checks, no host syncs). Any model with the
:class:`~attnlab.models.protocols.CausalLM` interface works.

Choosing the next token from the logits z of the last position:

* greedy: argmax z;
* sampling: softmax(z / temperature), restricted to the ``top_k`` most probable tokens
  (Fan et al. 2018) and/or to the smallest set whose probability reaches ``top_p``
  (nucleus sampling, Holtzman et al. 2020, §3.1), then renormalised. ``top_k=1`` and
  ``top_p`` → 0 are greedy. A ``seed`` (or a ``torch.Generator``) makes it reproducible.

Documented edge cases:

* an empty prompt raises ValueError (a decoder-only model needs at least one token to
  condition on; for unconditional text start from a BOS/newline token);
* a prompt longer than the model's context (``max_positions``) raises ValueError;
* a prompt that fits but would grow past the context while generating raises ValueError,
  unless ``sliding_window=True``: then, when a row reaches the context, the oldest half
  of the context is dropped and the last ``max_positions // 2`` tokens are run through
  the model again (positions restart at 0), so the model always sees at least the last
  half-context of tokens.
* stop ids and stop strings end a row; the token that completes them is the last one
  returned for that row.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from functools import partial

import torch
from torch import Tensor

from attnlab.generation.aot import aot_capacity, auto_step, use_aot
from attnlab.generation.compiled import bucket_capacity, check_compile, compiled_step, use_compiled
from attnlab.head_screen import resolve
from attnlab.linear import onednn_products, packed_inference

TokenCallback = Callable[[int, int], None]


def filter_logits(logits: Tensor, *, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """Set logits outside the top-k / nucleus to -inf. ``logits`` ``(B, V)``, returns a new tensor.

    The nucleus keeps, in decreasing probability, every token whose *preceding* tokens'
    cumulative probability is below ``top_p``, so the most probable token is always kept.
    """
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # probability mass ranked above each token
        remove_sorted = before >= top_p
        remove_sorted[:, 0] = False
        remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)
        logits = logits.masked_fill(remove, float("-inf"))
    return logits


def choose_next(logits: Tensor, *, greedy: bool, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None) -> Tensor:
    """Next token ids ``(B,)`` from last-position logits ``(B, V)``."""
    if greedy:
        return logits.argmax(dim=-1)
    logits = filter_logits(logits.float() / temperature, top_k=top_k, top_p=top_p)
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)[:, 0]


def _check_arguments(model, prompts, max_new_tokens, temperature, top_k, top_p, sliding_window) -> list[list[int]]:
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 0")
    if temperature <= 0:
        raise ValueError(f"temperature={temperature} must be > 0 (use greedy=True for argmax decoding)")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k={top_k} must be >= 1")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p={top_p} must be in (0, 1]")
    if isinstance(prompts, Tensor):
        prompts = prompts.tolist() if prompts.dim() == 2 else [prompts.tolist()]
    if not isinstance(prompts, Sequence) or len(prompts) == 0:
        raise ValueError(f"prompts must be a non-empty list of token-id lists, got {prompts!r}")
    if all(isinstance(t, int) for t in prompts):
        prompts = [prompts]
    prompts = [list(p) for p in prompts]
    config = model.config
    for i, prompt in enumerate(prompts):
        if len(prompt) == 0:
            raise ValueError(f"prompt {i} is empty; a decoder-only model needs at least one token to condition "
                             "on (start unconditional text from a BOS or newline token)")
    for i, prompt in enumerate(prompts):
        bad = [t for t in prompt if not (isinstance(t, int) and 0 <= t < config.vocab_size)]
        if bad:
            raise ValueError(f"prompt {i} contains token id {bad[0]!r}, outside the vocabulary [0, {config.vocab_size})")
        if len(prompt) > config.max_positions:
            raise ValueError(f"prompt {i} has {len(prompt)} tokens, longer than the model's context of "
                             f"max_positions={config.max_positions}; shorten it (e.g. keep its last "
                             f"{config.max_positions} tokens)")
        if not sliding_window and len(prompt) + max_new_tokens > config.max_positions:
            raise ValueError(f"prompt {i} ({len(prompt)} tokens) + max_new_tokens={max_new_tokens} exceeds the "
                             f"context of max_positions={config.max_positions}; generate fewer tokens or pass "
                             "sliding_window=True")
    return prompts


def _left_pad(prompts: list[list[int]], pad_id: int, device) -> tuple[Tensor, Tensor | None]:
    length = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), length), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros(len(prompts), length, dtype=torch.bool, device=device)
    for row, prompt in enumerate(prompts):
        ids[row, length - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        mask[row, length - len(prompt):] = True
    return ids, (None if bool(mask.all()) else mask)


@torch.inference_mode()
def generate(model, prompts, *, max_new_tokens: int = 100, greedy: bool = False, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
             generator: torch.Generator | None = None, stop_ids: Sequence[int] = (),
             stop_strings: Sequence[str] = (), tokenizer=None, on_token: TokenCallback | None = None,
             sliding_window: bool = False, cuda_graph: bool | None = None,
             compile: bool | str = False) -> list[list[int]]:
    """Continue each prompt by up to ``max_new_tokens`` tokens.

    Args:
        model: a :class:`~attnlab.models.protocols.CausalLM` (e.g. a
            :class:`~attnlab.models.lm.DecoderLM`: ``config``, ``new_cache``, ``prefill``,
            ``step``); it runs in eval mode (no dropout) and gets its previous mode back.
        prompts: a list of token-id lists (different lengths allowed), one list, or a
            ``(B, L)`` / ``(L,)`` tensor.
        greedy: argmax decoding; otherwise sample with ``temperature``, ``top_k``, ``top_p``.
        seed / generator: randomness for sampling (``seed`` builds a fresh generator).
        stop_ids: token ids that end a row (the config's ``eos_id`` is *not* added
            implicitly; pass it here).
        stop_strings: strings that end a row once its decoded continuation contains them;
            needs ``tokenizer`` (anything with ``decode(list[int]) -> str``).
        on_token: ``on_token(row, token_id)``, called for every token as it is produced
            (streaming).
        sliding_window: allow generating past the context (see the module docstring).
        cuda_graph: replay one captured CUDA graph per token (:mod:`attnlab.generation.graphs`);
            default: on a CUDA device for greedy decoding without stops, streaming or a
            sliding window. The tokens are the same as without.
        compile: run each step compiled by ``torch.compile`` over a fixed-shape cache
            (:mod:`attnlab.generation.compiled`; not with ``sliding_window``): the first
            call per batch size and capacity bucket compiles (seconds), later steps skip
            most per-operator overhead. The logits equal the eager step's up to float
            rounding. Without a C++ compiler: a warning, and eager steps.
            ``compile="aot"``: the step compiled ahead of time (:mod:`attnlab.generation.aot`:
            no Python in the step; one package per model structure and batch size, built once
            into the user cache, 25-140 s, then loaded); the greedy tokens equal the eager
            step's. Without a C++ compiler, or where export fails: one warning, eager steps.
            ``compile="auto"`` (the ``generate`` verb's default): that package where one is already
            built for this model and batch (``attnlab compile``, or an earlier ``compile="aot"``) on
            the CPU, else the eager step; never a build (:func:`~attnlab.generation.aot.auto_step`).
            With ``sliding_window``: the eager step.
    Returns:
        The new tokens of each row (not the prompt), cut after a stop.
    """
    prompts = _check_arguments(model, prompts, max_new_tokens, temperature, top_k, top_p, sliding_window)
    check_compile(compile)
    if compile and compile != "auto" and sliding_window:
        raise ValueError(f"compile={compile!r} needs a fixed cache capacity; it cannot be combined with "
                         "sliding_window=True")
    if stop_strings and tokenizer is None:
        raise ValueError(f"stop_strings={list(stop_strings)!r} need a tokenizer to decode the text")
    was_training = model.training
    model.eval()
    # On an AMD CPU with AVX-512 the eager products go to oneDNN, as the searches' do (linear.onednn_products:
    # MKL runs its AVX2 kernels there; GPT-2 small, 8 prompts, 2.1x as fast): not under torch.compile (compile=True)
    products = packed_inference() if onednn_products() and compile is not True else contextlib.nullcontext()
    try:
        with products:
            return _generate(model, prompts, max_new_tokens, greedy, temperature, top_k, top_p, seed, generator,
                             stop_ids, stop_strings, tokenizer, on_token, sliding_window, cuda_graph, compile)
    finally:
        model.train(was_training)


def _generate(model, prompts, max_new_tokens, greedy, temperature, top_k, top_p, seed, generator, stop_ids,
              stop_strings, tokenizer, on_token, sliding_window, cuda_graph, compile) -> list[list[int]]:
    config = model.config
    device = next(model.parameters()).device
    if seed is not None and generator is None:
        generator = torch.Generator(device=device).manual_seed(seed)
    batch = len(prompts)
    outputs: list[list[int]] = [[] for _ in range(batch)]
    if max_new_tokens == 0:
        return outputs
    stop_set = set(stop_ids)
    longest_stop = max((len(s) for s in stop_strings), default=0)
    watch = bool(stop_set or stop_strings or on_token)  # do we need the tokens on the host every step?
    done = [False] * batch
    history = [list(p) for p in prompts]  # for the sliding window

    ids, mask = _left_pad(prompts, config.pad_id, device)
    graph_fits = greedy and not (watch or sliding_window) and device.type == "cuda" and compile != "aot"
    if cuda_graph and not graph_fits:
        raise ValueError("cuda_graph=True needs greedy decoding on a CUDA device without stops, on_token or "
                         "sliding_window")
    if graph_fits and cuda_graph is not False:
        # Nothing to look at between tokens: one replayed CUDA graph per token, captured once
        # per batch and length bucket and kept for later calls.
        from attnlab.generation.graphs import greedy_graphs

        return greedy_graphs(model)(ids, mask, max_new_tokens).tolist()
    capacity = ids.shape[1] + max_new_tokens
    decode_step = model.step
    aot = None
    if compile in ("aot", "auto") and not sliding_window:  # ("aot" with a window: refused by generate)
        # One package for every capacity where the pattern allows (a dynamic size), else per bucket.
        # "auto": the package where one is built (asked before the cache is made), else the eager step.
        fixed = aot_capacity(model, capacity)
        aot = auto_step(model, "causal", rows=batch, capacity=fixed, greedy=greedy) if compile == "auto" else None
        if compile == "aot" or aot is not None:
            cache = model.new_cache(batch, fixed, fixed_shape=True)
            aot = aot or use_aot(model, "causal", cache, greedy=greedy)
        if aot is None:
            cache = model.new_cache(batch, capacity)
        else:
            decode_step = aot
    elif use_compiled(compile, device):
        # Every step the same shapes: one compilation serves all steps of this bucket.
        cache = model.new_cache(batch, bucket_capacity(capacity, config.max_positions), fixed_shape=True)
        decode_step = partial(compiled_step(model), model)
    else:
        cache = model.new_cache(batch, min(capacity, config.max_positions) if sliding_window else capacity)
    logits = model.prefill(ids, cache, mask)
    # Without stops or streaming, tokens stay on the device until the end (no per-step sync).
    produced = torch.empty(batch, max_new_tokens, dtype=torch.long, device=device)
    longest_row = ids.shape[1]  # tokens in the longest row = position of its next token
    # A greedy package with its head screened returns the next tokens, not logits (attnlab.head_screen)
    screened = aot is not None and aot.layout.greedy
    chosen = None
    for step in range(max_new_tokens):
        tokens = chosen if chosen is not None else choose_next(logits, greedy=greedy, temperature=temperature,
                                                               top_k=top_k, top_p=top_p, generator=generator)  # (B,)
        produced.select(1, step).copy_(tokens)
        if watch or sliding_window:
            for row, token in enumerate(tokens.tolist()):
                if done[row]:
                    continue
                outputs[row].append(token)
                history[row].append(token)
                if on_token is not None:
                    on_token(row, token)
                if token in stop_set:
                    done[row] = True
                elif stop_strings:
                    tail = tokenizer.decode(outputs[row][-(longest_stop + 8):])
                    done[row] = any(s in tail for s in stop_strings)
            if all(done):
                break
        if step == max_new_tokens - 1:
            break
        if sliding_window and longest_row >= config.max_positions:
            # Context full: keep the last half-context of every row and prefill again.
            keep = max(1, config.max_positions // 2)
            ids, mask = _left_pad([h[-keep:] for h in history], config.pad_id, device)
            cache = model.new_cache(batch, min(ids.shape[1] + max_new_tokens - step, config.max_positions))
            logits = model.prefill(ids, cache, mask)
            longest_row = ids.shape[1]
            continue
        if screened:
            chosen = resolve(*decode_step(tokens, cache), model.step_logits)
        else:
            logits = decode_step(tokens, cache)  # the new token sits at position longest_row
        longest_row += 1
    if not (watch or sliding_window):
        outputs = produced.tolist()
    return outputs


@torch.inference_mode()
def generate_text(model, tokenizer, prompts: str | Sequence[str], **kwargs) -> list[str]:
    """:func:`generate` on strings: encode with ``tokenizer``, return the decoded continuations."""
    if isinstance(prompts, str):
        prompts = [prompts]
    encoded = [tokenizer.encode(p) for p in prompts]
    kwargs.setdefault("tokenizer", tokenizer)
    return [tokenizer.decode(tokens) for tokens in generate(model, encoded, **kwargs)]


__all__ = ["choose_next", "filter_logits", "generate", "generate_text"]
