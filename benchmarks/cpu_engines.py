"""CPU decoding engines side by side: attnlab, HuggingFace transformers and CTranslate2.

GPT-2-shaped decoders with the same random weights in one process: HuggingFace initialises
a ``GPT2LMHeadModel`` (seed 0), ``attnlab.interop.from_hf_gpt2`` copies it, CTranslate2
converts the same saved directory (with a word-level tokenizer "t0".."tV-1" so token ids
pass through unchanged). Measured: batch 1, greedy, a 16-token prompt, medians of
interleaved repetitions (``common.interleaved_medians``), tokens/s and ratios, in

* fp32: attnlab, HF, CTranslate2 ``float32``; the tokens must be identical (attnlab vs HF
  is asserted, CTranslate2's are compared and any difference reported);
* int8: attnlab ``model.quantize("int8")`` (``attnlab.quantize``), CTranslate2 ``int8``
  (weights converted with ``quantization="int8"``); HF has no int8 path for GPT-2 here
  (its ``Conv1D`` layers are not ``nn.Linear``, so ``quantize_dynamic`` leaves them alone).
  How many tokens each follows the fp32 output is reported (random weights give nearly flat
  distributions, so int8 rounding changes a near-tie early: a check that it runs, not of
  quality; tests/test_quantize.py measures agreement on trained models).

Sizes: small (3 layers, d 256, vocabulary 8k, 128 new tokens), medium (6, 512, 8k, 128),
gpt2 (GPT-2 small: 12, 768, 50,257, 64 new tokens); threads 1 and 2.

``--kernels``: the micro-benchmark behind attnlab's choice of int8 kernel: one decode step's
linear layers of GPT-2 small (batch 1 and 4, one thread), float32 ``F.linear`` against
``torch.ops.quantized.linear_dynamic`` and the weight-only ``torch.ops.aten._weight_int8pack_mm``.

``--translate``: beam-4 translation against CTranslate2's ``Translator`` on the same weights,
at the ``transformer_base`` shape (6+6 layers, d 512, 8 heads, FFN 2048, vocabulary 32,000)
and the ``multi30k`` preset's (3+3, 256, 4, 1024, 8,000), both in Marian's layout: a
randomly initialised ``MarianMTModel`` (HuggingFace's init, seed 0) saved as an OPUS-MT
directory with a sentencepiece model trained here on Multi30k's German side, loaded by
``attnlab.interop.load_hf_marian`` and converted by ``ctranslate2.converters.TransformersConverter``.
Sources: Multi30k's test_2016_flickr German sentences (16 at batch 1, 32 at batch 32),
tokenised by the directory's tokenizer; CT2 gets the same pieces. Same settings: beam 4, one
hypothesis, length penalty off (attnlab ``alpha=0``, CT2 ``length_penalty=0``: both score
by the summed log-probability; with a penalty the two engines' formulas differ), no minimum
length, a maximum output of ceil(1.2 x the batch's longest source + 10) tokens. With random
weights no hypothesis reaches EOS, so every sentence decodes to that maximum in both engines
(the same work). Reported: sentences/s, the ratio, and how many best hypotheses are identical.

``--bandwidth``: GPT-2 small's greedy decoding (batch 1, attnlab fp32 and int8) as a fraction
of the memory-bandwidth bound: bytes read per token (every linear weight, the tied 50,257 x
768 head in full, biases, LayerNorms, the KV cache at the mean position; int8: 1-byte
weights + a 4-byte scale per row) against a measured large-GEMV bandwidth (float32
``torch.mv`` over a 512 MB matrix, beyond the L3), per thread count.

CTranslate2 is a benchmark-only dependency (``pip install ctranslate2``); without it, or with
``--no-ct2``, its columns are skipped.

``--compile`` adds a column: attnlab fp32 with the compiled step (``generate(...,
compile=True)``, attnlab.generation.compiled); its compilation happens in the untimed first
call, and its tokens are compared with the eager ones. ``--aot`` adds attnlab fp32 with the
step compiled ahead of time (``compile="aot"``, attnlab.generation.aot; the package is built
or loaded from $ATTNLAB_CACHE in the untimed first call) to the greedy rows and to
``--translate``'s beam search (its best hypotheses compared with the eager search's too).
``--aot`` also adds attnlab int8 through a package (``compile="aot"`` on the int8 model: inductor's
weight-only int8 GEMM on bfloat16 inputs, weights folded in; attnlab.quantize).

Run:  python benchmarks/cpu_engines.py [--quick] [--sizes small medium gpt2] [--threads 1 2]
      [--repeats 5] [--kernels] [--no-ct2] [--compile] [--aot]
      python benchmarks/cpu_engines.py --translate [--shapes transformer_base multi30k] [--batches 1 32]
      python benchmarks/cpu_engines.py --bandwidth
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
import warnings

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import interleaved_medians  # noqa: E402

from attnlab.generation import generate  # noqa: E402
from attnlab.interop import from_hf_gpt2  # noqa: E402

SIZES = {
    "small": (dict(n_layer=3, n_embd=256, n_head=8, vocab_size=8000, n_positions=1024), 128),
    "medium": (dict(n_layer=6, n_embd=512, n_head=8, vocab_size=8000, n_positions=1024), 128),
    "gpt2": (dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024), 64),
}
PROMPT_TOKENS = 16


def build(size: str, directory: str, with_ct2: bool):
    """HF model (seed 0), attnlab's copy, and the CTranslate2 conversions (fp32, int8) in ``directory``."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(**SIZES[size][0], bos_token_id=0, eos_token_id=0)
    hf = GPT2LMHeadModel(config).eval()
    ours = from_hf_gpt2(hf)
    converted = {}
    if with_ct2:
        import ctranslate2
        from tokenizers import Tokenizer, models
        from transformers import PreTrainedTokenizerFast

        hf_dir = os.path.join(directory, "hf")
        hf.save_pretrained(hf_dir)
        vocab = {f"t{i}": i for i in range(config.vocab_size)}
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0")),
                                            eos_token="t0", bos_token="t0", unk_token="t0")
        tokenizer.save_pretrained(hf_dir)
        for name, quantization in (("float32", None), ("int8", "int8")):
            out = os.path.join(directory, f"ct2-{name}")
            ctranslate2.converters.TransformersConverter(hf_dir).convert(out, quantization=quantization)
            converted[name] = out
    return hf, ours, converted


def hf_generate(hf, prompt: torch.Tensor, new_tokens: int) -> list[int]:
    with torch.inference_mode():
        out = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                          min_new_tokens=new_tokens, do_sample=False, pad_token_id=0, eos_token_id=None)
    return out[0, prompt.shape[1]:].tolist()


def ours_generate(model, prompt: torch.Tensor, new_tokens: int, compile: bool | str = False) -> list[int]:
    return generate(model, prompt, max_new_tokens=new_tokens, greedy=True, compile=compile)[0]


def ct2_generate(generator, prompt: torch.Tensor, new_tokens: int) -> list[int]:
    tokens = [f"t{i}" for i in prompt[0].tolist()]
    result = generator.generate_batch([tokens], max_length=new_tokens, min_length=new_tokens, sampling_topk=1,
                                      beam_size=1, include_prompt_in_result=False)
    return result[0].sequences_ids[0]


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def run_size(size: str, threads_list: list[int], repeats: int, new_tokens: int, with_ct2: bool,
             compile: bool = False, aot: bool = False) -> None:
    with tempfile.TemporaryDirectory() as directory, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf, ours, converted = build(size, directory, with_ct2)
        ours_int8 = copy.deepcopy(ours).quantize("int8")
        prompt = torch.randint(1, SIZES[size][0]["vocab_size"], (1, PROMPT_TOKENS),
                               generator=torch.Generator().manual_seed(1))
        for threads in threads_list:
            torch.set_num_threads(threads)
            engines = {}
            if with_ct2:
                import ctranslate2

                engines = {name: ctranslate2.Generator(path, device="cpu", compute_type=name, intra_threads=threads)
                           for name, path in converted.items()}
            runs = {
                "attnlab fp32": lambda: ours_generate(ours, prompt, new_tokens),
                "HF fp32": lambda: hf_generate(hf, prompt, new_tokens),
                "attnlab int8": lambda: ours_generate(ours_int8, prompt, new_tokens),
            }
            if compile:  # its first call (below, for the tokens) compiles; the timed runs reuse it
                runs["attnlab compiled"] = lambda: ours_generate(ours, prompt, new_tokens, compile=True)
            if aot:  # the first call builds or loads the package (untimed)
                runs["attnlab aot"] = lambda: ours_generate(ours, prompt, new_tokens, compile="aot")
                runs["attnlab int8 aot"] = lambda: ours_generate(ours_int8, prompt, new_tokens, compile="aot")
            if with_ct2:
                runs["CT2 fp32"] = lambda: ct2_generate(engines["float32"], prompt, new_tokens)
                runs["CT2 int8"] = lambda: ct2_generate(engines["int8"], prompt, new_tokens)
            tokens = {name: fn() for name, fn in runs.items()}
            if tokens["attnlab fp32"] != tokens["HF fp32"]:
                raise SystemExit(f"{size}: attnlab and HF fp32 tokens differ at position "
                                 f"{first_difference(tokens['attnlab fp32'], tokens['HF fp32'])}")
            checks = ["fp32 tokens: attnlab == HF"]
            if with_ct2:
                where = first_difference(tokens["attnlab fp32"], tokens["CT2 fp32"])
                checks.append("attnlab == CT2" if where is None else f"CT2 differs from token {where}")
            if compile:
                where = first_difference(tokens["attnlab fp32"], tokens["attnlab compiled"])
                checks.append("compiled == fp32" if where is None else f"compiled differs from token {where}")
            if aot:
                where = first_difference(tokens["attnlab fp32"], tokens["attnlab aot"])
                checks.append("aot == fp32" if where is None else f"aot differs from token {where}")
            for name in [n for n in runs if "int8" in n]:  # greedy paths diverge for good after one difference
                where = first_difference(tokens["attnlab fp32"], tokens[name])
                checks.append(f"{name} == fp32" if where is None else f"{name} follows fp32 for {where} tokens")
            if aot:  # the package's products in integers (one row) are the eager int8 kernel's arithmetic
                where = first_difference(tokens["attnlab int8"], tokens["attnlab int8 aot"])
                checks.append("int8 aot == int8 eager" if where is None else f"int8 aot differs from int8 eager at "
                                                                             f"token {where}")
            medians = interleaved_medians(runs, repeats=repeats)
            rate = {name: new_tokens / seconds for name, seconds in medians.items()}
            print(f"\n{size} (layers {SIZES[size][0]['n_layer']}, d {SIZES[size][0]['n_embd']}, vocabulary "
                  f"{SIZES[size][0]['vocab_size']}), {new_tokens} new tokens, {threads} thread(s); " + "; ".join(checks))
            for name in runs:
                print(f"  {name:14s} {rate[name]:8.1f} tokens/s")
            print(f"  ratios: attnlab/HF fp32 {rate['attnlab fp32'] / rate['HF fp32']:.2f}x, attnlab int8/fp32 "
                  f"{rate['attnlab int8'] / rate['attnlab fp32']:.2f}x" + (
                      f", attnlab/CT2 fp32 {rate['attnlab fp32'] / rate['CT2 fp32']:.2f}x, attnlab/CT2 int8 "
                      f"{rate['attnlab int8'] / rate['CT2 int8']:.2f}x" if with_ct2 else "")
                  + (f", compiled/eager fp32 {rate['attnlab compiled'] / rate['attnlab fp32']:.2f}x" if compile else "")
                  + (f", compiled/CT2 fp32 {rate['attnlab compiled'] / rate['CT2 fp32']:.2f}x"
                     if compile and with_ct2 else "")
                  + (f", aot/eager fp32 {rate['attnlab aot'] / rate['attnlab fp32']:.2f}x" if aot else "")
                  + (f", aot/CT2 fp32 {rate['attnlab aot'] / rate['CT2 fp32']:.2f}x" if aot and with_ct2 else "")
                  + (f", int8 aot/eager {rate['attnlab int8 aot'] / rate['attnlab int8']:.2f}x" if aot else "")
                  + (f", int8 aot/CT2 int8 {rate['attnlab int8 aot'] / rate['CT2 int8']:.2f}x" if aot and with_ct2
                     else ""))


def kernels(repeats: int, quick: bool) -> None:
    """One decode step's linear layers of GPT-2 small, per kernel (one thread)."""
    torch.set_num_threads(1)
    shapes = [(2304, 768), (768, 768), (3072, 768), (768, 3072)]
    head = (50257, 768)
    warnings.simplefilter("ignore")
    print("\nkernels: one GPT-2-small decode step's linear layers (12 x 4 matrices + the 50,257 x 768 head), "
          "1 thread, ms")
    for rows in (1, 4):
        total = {"float32 F.linear": 0.0, "quantized.linear_dynamic": 0.0, "_weight_int8pack_mm": 0.0}
        for out_features, in_features in shapes + [head]:
            weight = torch.randn(out_features, in_features) * 0.02
            x = torch.randn(rows, in_features)
            scales = weight.abs().amax(1) / 127
            values = torch.round(weight / scales[:, None]).to(torch.int8)
            quantized = torch._make_per_channel_quantized_tensor(values, scales.double(),
                                                                 torch.zeros(out_features, dtype=torch.long), 0)
            packed = torch.ops.quantized.linear_prepack(quantized, None)
            calls = 3 if quick else (20 if out_features > 10000 else 100)
            runs = {
                "float32 F.linear": lambda: [F.linear(x, weight) for _ in range(calls)],
                "quantized.linear_dynamic": lambda: [torch.ops.quantized.linear_dynamic(x, packed, True)
                                                     for _ in range(calls)],
                "_weight_int8pack_mm": lambda: [torch.ops.aten._weight_int8pack_mm(x, values, scales)
                                                for _ in range(calls)],
            }
            medians = interleaved_medians(runs, repeats=repeats)
            count = 1 if (out_features, in_features) == head else 12
            for name, seconds in medians.items():
                total[name] += count * seconds / calls
        print(f"  batch {rows}: " + ", ".join(f"{name} {seconds * 1e3:.1f}" for name, seconds in total.items()))


# -- beam-4 translation: attnlab vs CTranslate2's Translator on the same Marian weights -----
TRANSLATE_SHAPES = {
    # transformer_base: the paper's base dims; multi30k: the preset's dims (3+3, 256, 4 heads,
    # 1024), in Marian's post-LN layout (MarianMTModel has no pre-LN option).
    "transformer_base": dict(d_model=512, heads=8, ffn=2048, layers=6, vocab=32000),
    "multi30k": dict(d_model=256, heads=4, ffn=1024, layers=3, vocab=8000),
}
MULTI30K_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "attnlab", "data", "multi30k")


def multi30k_lines(name: str) -> list[str]:
    import gzip

    with gzip.open(os.path.join(MULTI30K_DIR, name), "rt", encoding="utf-8") as lines:
        return [line.strip() for line in lines]


def train_sentencepiece(directory: str) -> str:
    """An 8,000-piece unigram model of Multi30k's German training side (a few seconds)."""
    import sentencepiece

    prefix = os.path.join(directory, "spm")
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(multi30k_lines("train.de.gz")), model_prefix=prefix, vocab_size=8000,
        model_type="unigram", character_coverage=1.0, bos_id=-1, eos_id=1, unk_id=0, pad_id=-1, minloglevel=2)
    return prefix + ".model"


def build_marian(shape: str, directory: str, spm_model: str) -> str:
    """A randomly initialised MarianMTModel at ``shape`` (HF's init, seed 0) saved as an
    OPUS-MT directory: config, weights, source/target.spm (``spm_model``), vocab.json with
    Marian's layout (</s> 0, <unk> 1, the pieces, filler pieces up to the vocabulary size,
    <pad> last = decoder start, never generated)."""
    import json
    import shutil

    import sentencepiece
    import transformers

    dims = TRANSLATE_SHAPES[shape]
    out = os.path.join(directory, shape)
    os.makedirs(out)
    for name in ("source.spm", "target.spm"):
        shutil.copy(spm_model, os.path.join(out, name))
    processor = sentencepiece.SentencePieceProcessor(model_file=spm_model)
    vocab = {"</s>": 0, "<unk>": 1}
    for i in range(processor.get_piece_size()):
        piece = processor.id_to_piece(i)
        if piece not in vocab and piece not in ("<s>", "<unk>", "</s>"):
            vocab[piece] = len(vocab)
    while len(vocab) < dims["vocab"] - 1:
        vocab[f"<extra_{len(vocab)}>"] = len(vocab)
    vocab["<pad>"] = pad = len(vocab)
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as file:
        json.dump(vocab, file, ensure_ascii=False)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as file:
        json.dump({"source_lang": "de", "target_lang": "en", "tokenizer_class": "MarianTokenizer"}, file)
    torch.manual_seed(0)
    config = transformers.MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=dims["d_model"],
        encoder_layers=dims["layers"], decoder_layers=dims["layers"], encoder_attention_heads=dims["heads"],
        decoder_attention_heads=dims["heads"], encoder_ffn_dim=dims["ffn"], decoder_ffn_dim=dims["ffn"],
        max_position_embeddings=512, pad_token_id=pad, eos_token_id=0, bos_token_id=0, decoder_start_token_id=pad,
        scale_embedding=True, activation_function="swish", dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, share_encoder_decoder_embeddings=True, tie_word_embeddings=True)
    hf = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        hf.model.shared.weight[pad] = 0.0  # Marian's decoder starts from a zero embedding
    hf.generation_config = transformers.GenerationConfig(
        bad_words_ids=[[pad]], bos_token_id=0, decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=0,
        max_length=512, num_beams=4, pad_token_id=pad)
    hf.save_pretrained(out)
    return out


def translation_batches(tokenizer, sentences: list[str], batch: int, pad_id: int, eos_id: int):
    """(source ids (B, S) right-padded with EOS appended, the max output length both engines
    get: ceil(1.2 x the longest source + 10))."""
    import math

    ids = [tokenizer.encode(sentence) + [eos_id] for sentence in sentences]
    batches = []
    for start in range(0, len(ids), batch):
        chunk = ids[start:start + batch]
        longest = max(map(len, chunk))
        src = torch.full((len(chunk), longest), pad_id, dtype=torch.long)
        for row, tokens in enumerate(chunk):
            src[row, :len(tokens)] = torch.tensor(tokens)
        batches.append((src, [len(tokens) for tokens in chunk], math.ceil(1.2 * longest + 10)))
    return batches


def ct2_pieces(tokenizer, src: torch.Tensor, lengths: list[int]) -> list[list[str]]:
    """CT2's input for a padded batch of ``translation_batches``: each source's pieces, padding cut."""
    return [tokenizer.pieces(src[row, :n].tolist()) for row, n in enumerate(lengths)]


def ct2_beam(translator, tokenizer, pieces: list[list[str]], limit: int) -> list[list[int]]:
    """CT2's best hypothesis (token ids) for each source: beam 4, plain log-probabilities
    (length_penalty 0), at most ``limit`` tokens, the settings attnlab's side runs with."""
    return [[tokenizer.vocab[piece] for piece in result.hypotheses[0]] for result in translator.translate_batch(
        pieces, beam_size=4, length_penalty=0.0, max_decoding_length=limit, min_decoding_length=0, max_batch_size=0)]


def run_translate(shape: str, threads_list: list[int], batch_sizes: list[int], sentences: dict[int, int],
                  repeats: int, directory: str, spm_model: str, aot: bool = False) -> list[dict]:
    import ctranslate2

    from attnlab.generation import beam_search
    from attnlab.interop import load_hf_marian

    hf_dir = build_marian(shape, directory, spm_model)
    ct2_dir = hf_dir + "-ct2"
    ctranslate2.converters.TransformersConverter(hf_dir).convert(ct2_dir, quantization=None)
    model, tokenizer, _ = load_hf_marian(hf_dir)
    config = model.config
    test = multi30k_lines("test_2016_flickr.de.gz")
    rows = []
    for batch in batch_sizes:
        batches = translation_batches(tokenizer, test[:sentences[batch]], batch, config.pad_id, config.eos_id)
        ct2_sources = [ct2_pieces(tokenizer, src, lengths) for src, lengths, _ in batches]
        count = sum(len(lengths) for _, lengths, _ in batches)
        for threads in threads_list:
            torch.set_num_threads(threads)
            translator = ctranslate2.Translator(ct2_dir, device="cpu", compute_type="float32", intra_threads=threads)
            outputs: dict[str, list] = {}

            def ours(compile=False, name="attnlab"):
                outputs[name] = [hyps[0].tokens for src, _, limit in batches
                                 for hyps in beam_search(model, src, beam_size=4, alpha=0.0, max_len_a=0,
                                                         max_len_b=limit, compile=compile)]

            def theirs():
                outputs["CT2"] = [best for source, (_, _, limit) in zip(ct2_sources, batches)
                                  for best in ct2_beam(translator, tokenizer, source, limit)]

            runs = {"attnlab": ours, "CT2": theirs}
            if aot:
                runs["attnlab aot"] = lambda: ours("aot", "attnlab aot")
                runs["attnlab aot"]()  # builds or loads the package, untimed
            medians = interleaved_medians(runs, repeats=repeats)
            ours_tokens = [[t for t in tokens if t != config.eos_id] for tokens in outputs["attnlab"]]
            same = sum(a == b for a, b in zip(ours_tokens, outputs["CT2"]))
            ended = sum(bool(tokens) and tokens[-1] == config.eos_id for tokens in outputs["attnlab"])
            lengths = [len(tokens) for tokens in outputs["attnlab"]]
            row = dict(shape=shape, batch=batch, threads=threads, sentences=count,
                       attnlab=count / medians["attnlab"], ct2=count / medians["CT2"], same=same, ended=ended,
                       mean_out=sum(lengths) / len(lengths),
                       mean_src=sum(n for _, ls, _ in batches for n in ls) / count)
            row["ratio"] = row["attnlab"] / row["ct2"]
            aot_text = ""
            if aot:
                row["aot"] = count / medians["attnlab aot"]
                aot_same = sum(a == b for a, b in zip(outputs["attnlab aot"], outputs["attnlab"]))
                aot_text = (f"; aot {row['aot']:7.2f} sent/s, aot/CT2 {row['aot'] / row['ct2']:.2f}x, aot/eager "
                            f"{row['aot'] / row['attnlab']:.2f}x, aot best == eager best {aot_same}/{count}")
            rows.append(row)
            print(f"  {shape:16s} batch {batch:2d}, {threads} thread(s), {count} sentences: attnlab "
                  f"{row['attnlab']:7.2f} sent/s, CT2 {row['ct2']:7.2f} sent/s, attnlab/CT2 {row['ratio']:.2f}x; "
                  f"identical best hypotheses {same}/{count}; mean source {row['mean_src']:.1f}, mean output "
                  f"{row['mean_out']:.1f} tokens, {ended} ended in EOS{aot_text}", flush=True)
    return rows


def translate(shapes: list[str], threads_list: list[int], batch_sizes: list[int], repeats: int, quick: bool,
              aot: bool = False) -> None:
    print("\nbeam-4 translation, attnlab vs CTranslate2 Translator, same random Marian weights; alpha 0 (plain "
          "log-prob: CT2 length_penalty=0), min length 0, max length ceil(1.2 x longest source + 10) per batch; "
          "Multi30k test_2016_flickr German sources; medians of interleaved runs")
    sentences = {batch: (batch if quick else max(batch, 16)) for batch in batch_sizes}
    if quick:
        sentences = {batch: max(2, batch) for batch in batch_sizes}
    with tempfile.TemporaryDirectory() as directory, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        spm_model = train_sentencepiece(directory)
        for shape in shapes:
            run_translate(shape, threads_list, batch_sizes, sentences, repeats, directory, spm_model, aot)


# -- GPT-2 small decoding as a fraction of the memory-bandwidth bound ----------------------
def bytes_per_token(model, position: float) -> tuple[int, dict[str, int]]:
    """Bytes one greedy decode step of ``model`` (attnlab's GPT-2, fp32 or int8) reads: every
    linear layer's weight (float32: 4 bytes a value; int8: 1 byte + a 4-byte scale per row)
    and bias, every LayerNorm, the output projection in full (the tied 50,257 x 768 table;
    int8: its own int8 copy), and the keys and values cached at ``position`` (the mean
    position of the run); the embedding rows of one token and its position are left out."""
    from attnlab.quantize import QuantizedLinear

    parts = {"linear weights": 0, "biases": 0, "layer norms": 0, "KV cache": 0}
    for module in model.modules():
        if isinstance(module, QuantizedLinear):
            parts["linear weights"] += module.weight.values.numel() + 4 * module.out_features
            parts["biases"] += 0 if module.bias is None else module.bias.numel() * 4
        elif isinstance(module, torch.nn.Linear):
            parts["linear weights"] += module.weight.numel() * module.weight.element_size()
            parts["biases"] += 0 if module.bias is None else module.bias.numel() * 4
        elif isinstance(module, torch.nn.LayerNorm):
            parts["layer norms"] += sum(p.numel() * p.element_size() for p in module.parameters())
    layers = len(model.decoder.layers)
    d_model = model.config.d_model
    parts["KV cache"] = int(2 * layers * position * d_model * 4)
    return sum(parts.values()), parts


def bandwidth(threads_list: list[int], repeats: int, quick: bool) -> None:
    from common import matvec_bandwidth

    new_tokens = 16 if quick else SIZES["gpt2"][1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, ours, _ = build("gpt2", "", with_ct2=False)
    ours_int8 = copy.deepcopy(ours).quantize("int8")
    prompt = torch.randint(1, SIZES["gpt2"][0]["vocab_size"], (1, PROMPT_TOKENS),
                           generator=torch.Generator().manual_seed(1))
    position = PROMPT_TOKENS + (new_tokens - 1) / 2  # mean cache length over the generated tokens
    sizes = {"fp32": bytes_per_token(ours, position), "int8": bytes_per_token(ours_int8, position)}
    print(f"\nGPT-2 small ({SIZES['gpt2'][0]['n_layer']} layers, d {SIZES['gpt2'][0]['n_embd']}, vocabulary "
          f"{SIZES['gpt2'][0]['vocab_size']}) greedy decoding, batch 1, {PROMPT_TOKENS}-token prompt, {new_tokens} "
          f"new tokens, vs the memory-bandwidth bound (bandwidth: float32 torch.mv over a "
          f"{256 if quick else 512} MB matrix, median of {3 if quick else 7}); bytes read per token (mean cache position {position:.1f}):")
    for name, (total, parts) in sizes.items():
        print(f"  {name}: {total / 1e6:.1f} MB = " + ", ".join(f"{part} {value / 1e6:.2f} MB"
                                                          for part, value in parts.items()))
    for threads in threads_list:
        torch.set_num_threads(threads)
        measured = matvec_bandwidth(256 << 20 if quick else 512 << 20, repeats=3 if quick else 7)
        runs = {"fp32": lambda: ours_generate(ours, prompt, new_tokens),
                "int8": lambda: ours_generate(ours_int8, prompt, new_tokens)}
        medians = interleaved_medians(runs, repeats=repeats)
        again = matvec_bandwidth(256 << 20 if quick else 512 << 20, repeats=3 if quick else 7)
        print(f"  {threads} thread(s): bandwidth {measured / 1e9:.1f} GB/s before, {again / 1e9:.1f} GB/s after "
              f"the decoding runs (the bound uses their mean)")
        mean_bandwidth = (measured + again) / 2
        for name in runs:
            rate = new_tokens / medians[name]
            bound = mean_bandwidth / sizes[name][0]
            print(f"    attnlab {name}: {rate:6.1f} tokens/s, bound {bound:6.1f} tokens/s, fraction "
                  f"{rate / bound:.0%}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kernels", action="store_true", help="also the int8 kernel micro-benchmark")
    parser.add_argument("--translate", action="store_true",
                        help="beam-4 translation vs CTranslate2's Translator (instead of the GPT-2 engine rows)")
    parser.add_argument("--shapes", nargs="+", choices=list(TRANSLATE_SHAPES), default=list(TRANSLATE_SHAPES),
                        help="--translate's model shapes")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32], help="--translate's batch sizes")
    parser.add_argument("--bandwidth", action="store_true",
                        help="GPT-2 small as a fraction of the memory-bandwidth bound (instead of the engine rows)")
    parser.add_argument("--no-ct2", action="store_true", help="skip CTranslate2")
    parser.add_argument("--compile", action="store_true",
                        help="also attnlab fp32 with the compiled step (generate(..., compile=True))")
    parser.add_argument("--aot", action="store_true",
                        help="also attnlab fp32 with the step compiled ahead of time (compile='aot')")
    parser.add_argument("--quick", action="store_true",
                        help="a check that everything runs: small only, 1 thread, 16 new tokens, 2 repeats; "
                             "the translation rows at multi30k, batches 1 and 4; the bandwidth rows with 16 tokens")
    args = parser.parse_args()
    with_ct2 = not args.no_ct2
    if with_ct2:
        try:
            import ctranslate2  # noqa: F401
        except ImportError:
            print("ctranslate2 is not installed (pip install ctranslate2): its columns are skipped")
            with_ct2 = False
    engines = args.quick or not (args.translate or args.bandwidth)
    if args.quick:
        args.sizes, args.threads, args.repeats = ["small"], [1], 2
        args.shapes, args.batches, args.translate, args.bandwidth = ["multi30k"], [1, 4], True, True
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"quantized engine {torch.backends.quantized.engine}, load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs")
    start = time.perf_counter()
    if engines:
        for size in args.sizes:
            run_size(size, args.threads, args.repeats, 16 if args.quick else SIZES[size][1], with_ct2, args.compile,
                     args.aot)
    if args.kernels or args.quick:
        kernels(args.repeats, args.quick)
    if args.translate:
        if with_ct2:
            translate(args.shapes, args.threads, args.batches, 1 if args.quick else args.repeats, args.quick,
                      args.aot)
        else:
            print("\n--translate compares with CTranslate2, which is not available: skipped")
    if args.bandwidth:
        bandwidth(args.threads, args.repeats, args.quick)
    print(f"\n({time.perf_counter() - start:.0f} s, load average {os.getloadavg()[0]:.1f} at the end)")


if __name__ == "__main__":
    main()
