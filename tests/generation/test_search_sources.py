"""Search over any encoded source: a captioner-like model made of an encoder of feature
vectors (no padding mask) and the encoder–decoder's own TokenDecoder part."""

import torch
from torch import nn

import attnlab
from attnlab.generation import beam_search, greedy_search
from attnlab.generation.protocols import CausalLM, EncoderDecoder


class FeatureCaptioner(nn.Module):
    """Features ``(B, S, F)`` -> memory by one linear layer, memory mask None; the decoder
    is a Transformer's TokenDecoder, reused as a part."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        donor = attnlab.create_model("transformer_tiny", vocab_size=17, d_model=16, num_heads=2, d_ff=24,
                                     num_decoder_layers=2, positional="learned", max_positions=6)
        self.config = donor.config
        self.project = nn.Linear(5, 16)
        self.decoder = donor.decoder
        with torch.no_grad():
            self.decoder.embed.weight.mul_(3.0)

    def encode(self, features):
        return self.project(features), None

    def decode(self, tgt_ids, memory, memory_mask, *, cache=None):
        offset = 0 if cache is None else cache.length
        return self.decoder(tgt_ids, torch.arange(offset, offset + tgt_ids.shape[1]), memory=memory,
                            memory_mask=memory_mask, cache=cache)

    def new_cache(self, capacity: int = 64):
        return self.decoder.new_growing_cache(capacity)

    def max_output_length(self):
        return self.decoder.max_positions


def test_protocols_describe_the_models():
    assert isinstance(attnlab.create_model("transformer_tiny"), EncoderDecoder)
    assert isinstance(attnlab.create_model("lm_tiny"), CausalLM)
    assert isinstance(FeatureCaptioner(), EncoderDecoder)


def test_search_takes_features_and_a_none_memory_mask():
    model = FeatureCaptioner().eval()
    features = torch.randn(3, 4, 5)
    greedy = greedy_search(model, features, max_len_a=0, max_len_b=20)
    assert [h.tokens for h in greedy] == [h.tokens for h in greedy_search(model, features, max_len_a=0, max_len_b=20,
                                                                        use_cache=False)]
    # The model's learned table (6 positions) bounds every output, whatever max_len_b says.
    assert all(len(h.tokens) <= 6 for h in greedy)
    beams = beam_search(model, features, beam_size=3, max_len_a=0, max_len_b=20, nbest=3)
    naive = beam_search(model, features, beam_size=3, max_len_a=0, max_len_b=20, nbest=3, use_cache=False)
    assert [[h.tokens for h in b] for b in beams] == [[h.tokens for h in b] for b in naive]
    # beam 1 == greedy
    ones = beam_search(model, features, beam_size=1, max_len_a=0, max_len_b=20)
    assert [b[0].tokens for b in ones] == [h.tokens for h in greedy]


def test_source_length_counts_real_memory_positions():
    """max_len_a scales with the unmasked source positions (one rule, from the memory mask)."""
    model = attnlab.create_model("transformer_tiny", vocab_size=17).eval()
    src = torch.tensor([[5, 6, 7, 8, 2], [5, 2, 0, 0, 0]])
    never_eos = model.config.eos_id
    with torch.no_grad():
        model.decoder.head.weight[never_eos].fill_(0.0)  # tied: the EOS embedding too; fine for lengths
    hypotheses = greedy_search(model, src, max_len_a=1.0, max_len_b=0)
    assert [len(h.tokens) for h in hypotheses][1] <= 2 and len(hypotheses[0].tokens) <= 5
