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

    return TranslationSource(Translator.load(directory, device=device))
