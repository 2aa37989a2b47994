"""Small directories as other libraries write them (random weights, real tokenizer files),
built with those libraries, for tests outside tests/interop that need one: a HuggingFace
GPT-2 and MarianMT directory."""

from __future__ import annotations

import json
from pathlib import Path

import torch

TEXT = "ROMEO: But soft, what light through yonder window breaks? It is the east.\n" * 4
SOURCE = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch."] * 3
TARGET = ["A man rides a bicycle.", "Two dogs play in the snow.", "A woman reads a book."] * 3


def gpt2_directory(directory: Path) -> Path:
    import tokenizers
    import transformers

    directory.mkdir(parents=True)
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator([TEXT], vocab_size=280, min_frequency=1, show_progress=False)
    bpe.save_model(str(directory))
    config = transformers.GPT2Config(vocab_size=bpe.get_vocab_size(), n_positions=32, n_embd=16, n_layer=1, n_head=2,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(config).save_pretrained(str(directory), safe_serialization=True)
    return directory


def _spm(lines, prefix: Path, name: str) -> None:
    import sentencepiece

    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(prefix), vocab_size=40,
                                             model_type="unigram", character_coverage=1.0, hard_vocab_limit=False,
                                             bos_id=-1, eos_id=1, unk_id=0, pad_id=-1, minloglevel=2)
    (prefix.parent / (prefix.name + ".vocab")).unlink()
    (prefix.parent / (prefix.name + ".model")).rename(prefix.parent / name)


def marian_directory(directory: Path) -> Path:
    import sentencepiece
    import transformers

    directory.mkdir(parents=True)
    _spm(SOURCE, directory / "source", "source.spm")
    _spm(TARGET, directory / "target", "target.spm")
    vocab = {"</s>": 0, "<unk>": 1}
    for name in ("source.spm", "target.spm"):
        processor = sentencepiece.SentencePieceProcessor(model_file=str(directory / name))
        for i in range(processor.get_piece_size()):
            piece = processor.id_to_piece(i)
            if piece not in vocab and piece not in ("<s>",):
                vocab[piece] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (directory / "tokenizer_config.json").write_text(json.dumps({"source_lang": "de", "target_lang": "en"}))
    pad = vocab["<pad>"]
    config = transformers.MarianConfig(
        vocab_size=len(vocab), d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
        pad_token_id=pad, eos_token_id=0, bos_token_id=0, decoder_start_token_id=pad, scale_embedding=True)
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "layer_norm" not in name and "embed_positions" not in name:
                parameter.normal_(0.0, 0.3)
    model.generation_config = transformers.GenerationConfig(
        bad_words_ids=[[pad]], decoder_start_token_id=pad, eos_token_id=0, max_length=64, num_beams=2, pad_token_id=pad)
    model.save_pretrained(str(directory))
    return directory
