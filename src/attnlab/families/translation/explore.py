"""The explorer's view of a translation model: greedy translation, then encoder self,
decoder self and cross attention of the teacher-forced output."""

from __future__ import annotations

from pathlib import Path

from attnlab.viz.explorer.maps import Analysis, AttentionGroup, _check_length, _check_text, attention_maps


class TranslationSource:
    """A translation model directory: greedy translation, then encoder self, decoder self
    and cross attention of the teacher-forced output."""

    family = "transformer"

    def __init__(self, translator, *, max_tokens: int = 256):
        self.translator = translator
        self.max_tokens = max_tokens
        c = translator.model.config
        self.description = (f"encoder-decoder Transformer: {c.num_encoder_layers}+{c.num_decoder_layers} layers x "
                            f"{c.num_heads} heads, d_model={c.d_model}")
        self.default_text = "Ein Mann fährt mit dem Fahrrad über die Straße."

    def choose_default(self, directory) -> None:
        """The default sentence: the first source sentence of the model's own held-out data
        (``translation.json``: its --valid-src file, or its named set's test split), else the
        German one with a note saying it is not from the model's data (issue 39, point 4)."""
        from attnlab.viz.explorer.maps import note_default

        try:
            sentence, what = _held_out_sentence(directory, self.translator.info)
            _check_length(len(self.translator.tokenizer.encode_batch([sentence])[0]) + 1, self.max_tokens)
        except (ValueError, OSError) as error:
            language = self.translator.info.get("src_lang")
            other = f", not this model's source language ({language})" if language and language != "de" else ""
            note_default(self, f"default sentence: a German example{other}, not from this model's data ({error}); "
                               "type a sentence of yours")
        else:
            self.default_text = sentence
            note_default(self, f"default sentence: the first of {what}, the model's own held-out data")

    def analyse(self, text: str, **options) -> Analysis:
        from attnlab.generation import greedy_search

        text = _check_text(text, 20 * self.max_tokens)
        translator, model = self.translator, self.translator.model
        _check_length(len(translator.tokenizer.encode_batch([text])[0]) + 1, self.max_tokens)  # + EOS
        src_ids = translator._source_ids([text])[0]
        src = translator._pad([src_ids])
        output = greedy_search(model, src, max_len_a=1.5, max_len_b=10)[0].tokens
        tgt_in = [model.config.bos_id] + output[:-1]
        maps = attention_maps(model, src_ids=src, tgt_in_ids=translator._pad([tgt_in]))
        pieces = translator.tokenizer.pieces
        source, target_in, target_out = pieces(src_ids), pieces(tgt_in), pieces(output)
        # Decoder queries are labelled by the token they read (BOS, then the output so far),
        # cross-attention queries by the token they predict, as the static plots do.
        return Analysis(text, [AttentionGroup("encoder self", maps["encoder self"], source, source),
                               AttentionGroup("decoder self", maps["decoder self"], target_in, target_in),
                               AttentionGroup("cross", maps["cross"], target_out, source)],
                        output=translator.tokenizer.decode(output))


def load_source(directory: Path, device: str) -> TranslationSource:
    """A translation model directory (attnlab's, or an OPUS-MT MarianMT one)."""
    from attnlab.families.translation.translator import Translator

    source = TranslationSource(Translator.load(directory, device=device))
    source.choose_default(directory)
    return source


def _held_out_sentence(directory, info: dict) -> tuple[str, str]:
    """The first source sentence of the held-out data ``translation.json`` records, and
    what it is; ValueError when it records none or the data is not at hand."""
    from attnlab.cli.options import check_recorded_data
    from attnlab.families.translation.task import TASK_FILE

    if isinstance(info.get("valid_src"), str):
        path = check_recorded_data(directory, TASK_FILE, info["valid_src"], "a sentence of yours")
        with open(path, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if line.strip():
                    return line.strip(), path
        raise ValueError(f"{path} holds no sentence")
    if info.get("data") and info.get("src_lang") and info.get("tgt_lang"):
        from attnlab.data import get_parallel_dataset

        try:
            corpus = get_parallel_dataset(info["data"], "test", info["src_lang"], info["tgt_lang"])
        except FileNotFoundError as error:
            raise ValueError(f"{info['data']} is not at hand ({error})") from None
        if corpus.pairs:
            return corpus.pairs[0][0], corpus.description or f"{info['data']} test"
    raise ValueError(f"{Path(directory) / TASK_FILE} records no held-out data")


def attention(model, src_ids, tgt_in_ids):
    """This family's attention maps (its registration's ``attention``): the Transformer's
    three groups, from its own ``attention_maps``."""
    _, weights = model.attention_maps(src_ids, tgt_in_ids)
    return {"encoder self": weights.encoder, "decoder self": weights.decoder_self, "cross": weights.cross}
