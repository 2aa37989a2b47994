"""Greedy and beam-4 decoding at base dimensions: attnlab vs HuggingFace ``MarianMTModel.generate``.

    python benchmarks/decode_marian.py [--batch 8] [--src-len 20] [--vocab 8000] [--repeats 5]

One process builds attnlab's ``transformer_base`` (post-LN without final norms, shared and
tied embeddings: Marian's layout), random weights, and copies the same weights into a
Marian model built from the equivalent config (its sinusoidal position table is replaced
by ours: Marian concatenates the sine and cosine halves, the paper interleaves them).
Greedy outputs must be identical token for token. Beam search is reported side by side
but scores hypotheses differently (attnlab: GNMT length penalty ((5+L)/6)^α; HF:
log-prob / L^α), so the outputs and lengths may differ; tokens/s is printed too.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import interleaved_medians, matvec_bandwidth  # noqa: E402

import attnlab  # noqa: E402
from attnlab.generation import beam_search, greedy_search  # noqa: E402


@torch.no_grad()
def marian_from_attnlab(model, dropout: float = 0.0):
    """A MarianMTModel carrying ``model``'s weights (benchmark-only key map; ``model`` must be
    post-LN without final norms, Marian's layout). ``dropout`` is Marian's residual and
    embedding dropout, which is where attnlab's ``dropout`` acts."""
    from transformers import MarianConfig, MarianMTModel

    c = model.config
    config = MarianConfig(
        vocab_size=c.vocab_size, decoder_vocab_size=c.vocab_size, d_model=c.d_model,
        encoder_layers=c.num_encoder_layers, decoder_layers=c.num_decoder_layers,
        encoder_attention_heads=c.num_heads, decoder_attention_heads=c.num_heads,
        encoder_ffn_dim=c.d_ff, decoder_ffn_dim=c.d_ff, activation_function=c.activation,
        max_position_embeddings=c.max_positions, scale_embedding=True, dropout=dropout, attention_dropout=0.0,
        activation_dropout=0.0, pad_token_id=c.pad_id, eos_token_id=c.eos_id, decoder_start_token_id=c.bos_id,
        forced_eos_token_id=None, share_encoder_decoder_embeddings=True, tie_word_embeddings=True)
    peer = MarianMTModel(config)
    d = c.d_model
    peer.model.shared.weight.copy_(model.src_embed.weight)
    table = model.positions(torch.arange(c.max_positions))
    for stack, theirs in ((model.encoder, peer.model.encoder), (model.decoder, peer.model.decoder)):
        theirs.embed_positions.weight.copy_(table)
        for ours_layer, their_layer in zip(stack.layers, theirs.layers):
            pairs = [(ours_layer.self_attn, their_layer.self_attn, ours_layer.self_attn_norm,
                      their_layer.self_attn_layer_norm)]
            if ours_layer.cross_attn is not None:
                pairs.append((ours_layer.cross_attn, their_layer.encoder_attn, ours_layer.cross_attn_norm,
                              their_layer.encoder_attn_layer_norm))
            for attn, their_attn, norm, their_norm in pairs:
                for i, proj in enumerate((their_attn.q_proj, their_attn.k_proj, their_attn.v_proj)):
                    proj.weight.copy_(attn.qkv_proj.weight[i * d:(i + 1) * d])
                    proj.bias.copy_(attn.qkv_proj.bias[i * d:(i + 1) * d])
                their_attn.out_proj.weight.copy_(attn.out_proj.weight)
                their_attn.out_proj.bias.copy_(attn.out_proj.bias)
                their_norm.weight.copy_(norm.weight)
                their_norm.bias.copy_(norm.bias)
            their_layer.fc1.weight.copy_(ours_layer.ffn.linear1.weight)
            their_layer.fc1.bias.copy_(ours_layer.ffn.linear1.bias)
            their_layer.fc2.weight.copy_(ours_layer.ffn.linear2.weight)
            their_layer.fc2.bias.copy_(ours_layer.ffn.linear2.bias)
            their_layer.final_layer_norm.weight.copy_(ours_layer.ffn_norm.weight)
            their_layer.final_layer_norm.bias.copy_(ours_layer.ffn_norm.bias)
    peer.lm_head.weight = peer.model.shared.weight
    peer.final_logits_bias.zero_()
    return peer


def decoder_bytes_per_step(model) -> int:
    """Parameter bytes one decoder step reads: every decoder weight once, except the
    cross-attention key/value rows (used once per source, then cached), plus the tied
    output projection in full."""
    d = model.config.d_model
    total = 0
    for name, parameter in model.decoder.stack.named_parameters():
        if ".cross_attn.qkv_proj." in name:
            parameter = parameter[:d]  # only the query rows are read every step
        total += parameter.numel() * parameter.element_size()
    return total + model.output_proj.weight.numel() * model.output_proj.weight.element_size()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--src-len", type=int, default=20)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--max-len-b", type=int, default=50, help="max output length = src_len + this")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    torch.manual_seed(0)

    model = attnlab.create_model("transformer_base", vocab_size=args.vocab, final_norm=False, dropout=0.0,
                                 num_encoder_layers=args.layers, num_decoder_layers=args.layers).eval()
    # Random weights make every logit row nearly uniform; a larger output scale gives
    # sharper, more translation-like distributions (and decisive greedy choices).
    with torch.no_grad():
        model.src_embed.weight.mul_(4.0)
    peer = marian_from_attnlab(model).eval()
    src = torch.randint(3, args.vocab, (args.batch, args.src_len))
    src[:, -1] = model.config.eos_id
    attention_mask = torch.ones_like(src)
    max_new = args.src_len + args.max_len_b

    with torch.no_grad():
        logits_ours = model(src, torch.full((args.batch, 1), model.config.bos_id))
        logits_peer = peer(input_ids=src, attention_mask=attention_mask,
                           decoder_input_ids=torch.full((args.batch, 1), model.config.bos_id)).logits
    print(f"first-step logits max abs diff: {(logits_ours - logits_peer).abs().max().item():.2e}")

    results = {}

    def ours_greedy():
        results["ours_greedy"] = greedy_search(model, src, max_len_a=1.0, max_len_b=args.max_len_b)

    def peer_greedy():
        results["peer_greedy"] = peer.generate(input_ids=src, attention_mask=attention_mask, num_beams=1,
                                               do_sample=False, max_new_tokens=max_new, min_new_tokens=0)

    def ours_beam():
        results["ours_beam"] = beam_search(model, src, beam_size=4, alpha=0.6, max_len_a=1.0,
                                           max_len_b=args.max_len_b)

    def peer_beam():
        results["peer_beam"] = peer.generate(input_ids=src, attention_mask=attention_mask, num_beams=4,
                                             do_sample=False, max_new_tokens=max_new, length_penalty=0.6,
                                             early_stopping=True)

    with torch.inference_mode():
        medians = interleaved_medians({"ours_greedy": ours_greedy, "peer_greedy": peer_greedy,
                                       "ours_beam": ours_beam, "peer_beam": peer_beam}, repeats=args.repeats)

    def peer_tokens(output):
        rows = []
        for row in output[:, 1:].tolist():  # drop the decoder start token
            row = [t for t in row if t != model.config.pad_id]
            rows.append(row)
        return rows

    ours_greedy_tokens = [h.tokens for h in results["ours_greedy"]]
    same = ours_greedy_tokens == peer_tokens(results["peer_greedy"])
    print(f"greedy outputs identical: {same}")
    counts = {
        "ours_greedy": sum(map(len, ours_greedy_tokens)),
        "peer_greedy": sum(map(len, peer_tokens(results["peer_greedy"]))),
        "ours_beam": sum(len(h[0].tokens) for h in results["ours_beam"]),
        "peer_beam": sum(map(len, peer_tokens(results["peer_beam"]))),
    }
    print(f"batch {args.batch}, source length {args.src_len}, vocab {args.vocab}, max output {max_new}, "
          f"threads {torch.get_num_threads()}, median of {args.repeats}")
    for name, seconds in medians.items():
        print(f"  {name:12s} {seconds * 1000:9.1f} ms  {args.batch / seconds:7.2f} sentences/s  "
              f"{counts[name] / seconds:8.1f} output tokens/s  ({counts[name]} tokens)")
    for kind in ("greedy", "beam"):
        print(f"  {kind:6s} speed ratio attnlab / HF (sentences/s): "
              f"{medians[f'peer_{kind}'] / medians[f'ours_{kind}']:.2f}x")
    # The floor of any implementation: each step reads the decoder's weights from memory.
    bandwidth = matvec_bandwidth()
    steps = max(len(h.tokens) for h in results["ours_greedy"])
    floor = steps * decoder_bytes_per_step(model) / bandwidth
    print(f"  memory-bandwidth floor of greedy ({steps} steps x {decoder_bytes_per_step(model) / 1e6:.1f} MB of "
          f"weights at {bandwidth / 1e9:.1f} GB/s matrix-vector bandwidth): {floor * 1000:.0f} ms = "
          f"{medians['ours_greedy'] / floor:.2f}x below attnlab's greedy time, "
          f"{medians['peer_greedy'] / floor:.2f}x below HF's")
    if not same:
        raise SystemExit("greedy outputs differ: the comparison is not like for like")


if __name__ == "__main__":
    main()
