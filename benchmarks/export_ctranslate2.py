"""Does CTranslate2 read what ``attnlab export --format hf`` writes? (issue 38)

Three models go through ``attnlab export`` (the verb itself), then through
``ctranslate2.converters.TransformersConverter`` (ctranslate2 4.8.5), and the converted
model decodes; the tokens are compared with attnlab's own decoding of the original:

1. a character-level LM (GPT-2 layout; 4 layers, d_model 256, the characters of
   examples/corpus.txt): greedy continuation of prompts taken from that text (CTranslate2's
   Generator wants bos/eos/unk token names a character model lacks: the script fills them
   into the converted config.json and decodes without an end token);
2. a MarianMT model in OPUS-MT's layout (its decoder starts from ``<pad>``, a zero row of the
   embedding; random weights, 3+3 layers, d_model 256) read by attnlab and exported back:
   greedy and beam-4 translations of Multi30k validation sentences;
3. an attnlab translation model (the paper's post-LN layout, ``final_norm=False``, interleaved
   sinusoids; pad id 0; decoding starts from ``<s>``), exported to the Marian layout.

Weights are random (with a bias towards EOS on the output, so that translations end): the
check is about the conversion, not about quality. Each case prints how many outputs are
identical and, where one differs, at which token. CTranslate2's Marian loader assumes
OPUS-MT's conventions: ``<pad>`` is the last vocabulary entry (it drops that row) and the
decoder starts from a zero embedding whatever the start token. An attnlab vocabulary has
``<pad>`` at id 0 and starts from ``<s>``, so case 3 is refused by the converter (or, were
the rows reordered, would decode from another start): the script prints what it says.

Usage: ``python benchmarks/export_ctranslate2.py [--sentences 50] [--threads 1]``
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import warnings
from importlib.resources import files
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def multi30k(name: str, count: int) -> list[str]:
    with gzip.open(files("attnlab.data") / "multi30k" / name, "rt", encoding="utf-8") as handle:
        return [next(handle).strip() for _ in range(count)]


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def report(name: str, ours: list[list[int]], theirs: list[list[int]]) -> dict:
    differences = [first_difference(a, b) for a, b in zip(ours, theirs)]
    same = sum(d is None for d in differences)
    first = [d for d in differences if d is not None]
    tokens = sum(len(a) for a in ours)
    lengths = sorted(len(a) for a in ours)
    line = (f"{name}: {same}/{len(ours)} outputs identical ({tokens} attnlab tokens; lengths {lengths[0]}.."
            f"{lengths[-1]}, median {lengths[len(lengths) // 2]})"
            + (f"; the others differ from token {min(first)} (median {sorted(first)[len(first) // 2]})" if first else ""))
    print(line, flush=True)
    return {"case": name, "identical": same, "outputs": len(ours), "tokens": tokens, "lengths": lengths,
            "first_differences": first}


def export(model_dir: Path, out: Path) -> None:
    from attnlab.cli.main import main

    if main(["export", "--model", str(model_dir), "--format", "hf", "-o", str(out)]) != 0:
        raise SystemExit(f"attnlab export of {model_dir} failed")


def convert(hf_dir: Path) -> str:
    import ctranslate2

    out = str(hf_dir) + "-ct2"
    ctranslate2.converters.TransformersConverter(str(hf_dir)).convert(out, quantization=None, force=True)
    return out


def lm_case(root: Path, threads: int, prompts: int) -> dict:
    import ctranslate2

    from attnlab.data.text import CharTokenizer
    from attnlab.generation.sampling import generate
    from attnlab.models.lm import DecoderLM, DecoderLMConfig

    text = (REPO / "examples" / "corpus.txt").read_text(encoding="utf-8")
    tokenizer = CharTokenizer.from_text(text)
    torch.manual_seed(0)
    model = DecoderLM(DecoderLMConfig(vocab_size=tokenizer.vocab_size, d_model=256, num_heads=8, d_ff=1024,
                                      num_layers=4, max_positions=256, dropout=0.0)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.02 * torch.randn_like(parameter))
    model.save_pretrained(root / "lm")
    tokenizer.save(root / "lm")
    export(root / "lm", root / "lm-hf")
    converted = convert(root / "lm-hf")
    # CTranslate2's Generator needs bos/eos/unk token strings in its config.json; a character model
    # has none (the converter writes null), so the script names the first character for the three and
    # decodes with end_token=[] (no end token: nothing stops or suppresses a continuation early).
    settings = json.loads((Path(converted) / "config.json").read_text())
    first = tokenizer.chars[0]
    settings.update({key: settings.get(key) or first for key in ("bos_token", "eos_token", "unk_token")})
    (Path(converted) / "config.json").write_text(json.dumps(settings))
    generator = ctranslate2.Generator(converted, device="cpu", compute_type="float32", intra_threads=threads)
    lines = [line for line in text.splitlines() if len(line) > 20][:prompts]
    ours, theirs = [], []
    for line in lines:
        prompt = tokenizer.encode(line[:20])
        ours.append(generate(model, [prompt], max_new_tokens=64, greedy=True)[0])
        result = generator.generate_batch([list(line[:20])], max_length=64, sampling_topk=1, beam_size=1,
                                          end_token=[], include_prompt_in_result=False)
        theirs.append(result[0].sequences_ids[0])
    return report("char LM (GPT-2 layout), greedy, 64 new tokens", ours, theirs)


def translate_cases(model, tokenizer_pieces, piece_ids, sources, translator, name: str) -> list[dict]:
    from attnlab.generation import beam_search, greedy_search

    config = model.config
    rows = [ids + [config.eos_id] for ids in sources]
    results = []
    for beam in (1, 4):
        ours, theirs = [], []
        for row in rows:
            src = torch.tensor([row])
            if beam == 1:
                hypothesis = greedy_search(model, src, max_len_a=0, max_len_b=40)[0]
            else:
                hypothesis = beam_search(model, src, beam_size=4, alpha=0.0, max_len_a=0, max_len_b=40)[0][0]
            ours.append([t for t in hypothesis.tokens if t != config.eos_id])
            result = translator.translate_batch([tokenizer_pieces(row)], beam_size=beam, length_penalty=0.0,
                                                max_decoding_length=40, min_decoding_length=0)
            theirs.append([piece_ids[piece] for piece in result[0].hypotheses[0]])
        results.append(report(f"{name}, {'greedy' if beam == 1 else 'beam 4'}", ours, theirs))
    return results


def opus_case(root: Path, threads: int, sentences: list[str], train: list[str]) -> list[dict]:
    import ctranslate2
    import sentencepiece
    import transformers

    import attnlab

    source = root / "opus"
    source.mkdir()
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(train), model_prefix=str(root / "spm"),
                                             vocab_size=2000, model_type="unigram", bos_id=-1, eos_id=0, unk_id=1,
                                             pad_id=-1, minloglevel=2)
    for name in ("source.spm", "target.spm"):
        (source / name).write_bytes((root / "spm.model").read_bytes())
    processor = sentencepiece.SentencePieceProcessor(model_file=str(source / "source.spm"))
    vocab = {processor.id_to_piece(i): i for i in range(processor.get_piece_size())}
    vocab["<pad>"] = len(vocab)
    (source / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (source / "tokenizer_config.json").write_text(json.dumps({"source_lang": "de", "target_lang": "en"}))
    pad = vocab["<pad>"]
    config = transformers.MarianConfig(vocab_size=len(vocab), d_model=256, encoder_layers=3, decoder_layers=3,
                                       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=1024,
                                       decoder_ffn_dim=1024, max_position_embeddings=256, pad_token_id=pad,
                                       eos_token_id=0, decoder_start_token_id=pad, scale_embedding=True)
    torch.manual_seed(1)
    hf = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        hf.model.shared.weight.normal_(0.0, 0.3)  # logits large enough to pick varied tokens
        hf.model.shared.weight[pad] = 0  # OPUS-MT: the start token's row is zero
        hf.final_logits_bias[0, 0] = 3.6  # EOS likelier, so translations end
    hf.generation_config = transformers.GenerationConfig(bad_words_ids=[[pad]], decoder_start_token_id=pad,
                                                         eos_token_id=0, pad_token_id=pad, num_beams=4)
    hf.save_pretrained(source)
    export(source, root / "opus-hf")
    translator = ctranslate2.Translator(convert(root / "opus-hf"), device="cpu", compute_type="float32",
                                        intra_threads=threads)
    pipeline = attnlab.load(source)
    tokenizer = pipeline.tokenizer
    return translate_cases(pipeline.model, tokenizer.pieces, tokenizer.vocab, tokenizer.encode_batch(sentences),
                           translator, "MarianMT (OPUS-MT layout) read and exported back")


def attnlab_translation_case(root: Path, threads: int, sentences: list[str], train: list[str]) -> list[dict]:
    import ctranslate2

    from attnlab.data.tokenizer import Tokenizer
    from attnlab.models.transformer import Transformer, TransformerConfig

    tokenizer = Tokenizer.train(train, vocab_size=2000)
    config = TransformerConfig(vocab_size=tokenizer.vocab_size, d_model=256, num_heads=4, d_ff=1024,
                               num_encoder_layers=3, num_decoder_layers=3, dropout=0.0, final_norm=False,
                               output_bias=True)
    torch.manual_seed(2)
    model = Transformer(config).eval()
    with torch.no_grad():
        model.decoder.head.bias[config.eos_id] = 1.5
    model.save_pretrained(root / "attnlab-mt")
    tokenizer.save(root / "attnlab-mt")
    export(root / "attnlab-mt", root / "attnlab-mt-hf")
    try:
        converted = convert(root / "attnlab-mt-hf")
    except ValueError as error:  # CTranslate2's Marian loader: OPUS-MT's vocabulary layout only
        print(f"attnlab translation model (pad id 0, starts from <s>): TransformersConverter refuses it: {error}",
              flush=True)
        return [{"case": "attnlab translation model", "converted": False, "error": str(error)}]
    translator = ctranslate2.Translator(converted, device="cpu", compute_type="float32", intra_threads=threads)
    pieces = {tokenizer.pieces([i])[0]: i for i in range(tokenizer.vocab_size)}
    return translate_cases(model, tokenizer.pieces, pieces, tokenizer.encode_batch(sentences), translator,
                           "attnlab translation model (post-LN, starts from <s>)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import ctranslate2

    print(f"ctranslate2 {ctranslate2.__version__}, torch {torch.__version__}, threads {args.threads}", flush=True)
    sentences = multi30k("val.de.gz", args.sentences)
    train = multi30k("train.de.gz", 5000) + multi30k("train.en.gz", 5000)
    results = []
    with tempfile.TemporaryDirectory() as directory, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = Path(directory)
        results.append(lm_case(root, args.threads, args.sentences))
        results += opus_case(root, args.threads, sentences, train)
        results += attnlab_translation_case(root, args.threads, sentences, train)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
