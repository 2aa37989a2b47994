"""Training throughput (target tokens/s) at the ``multi30k`` preset's dimensions: attnlab vs
HuggingFace ``MarianMTModel`` built with the same dimensions, same weights, same batches.

    python benchmarks/train_marian.py [--batches 8] [--max-tokens 3072] [--repeats 5] [--threads N]
        [--tokenizer runs/multi30k_de_en/tokenizer.model]

Batches are real Multi30k De->En training batches (``TranslationBatches``, <= 3,072 padded
tokens, the recipe's size), encoded with the given sentencepiece model or with an 8,000-piece
BPE vocabulary learned here from the training pairs. One training step is: zero the
gradients, forward, label-smoothed cross-entropy (eps 0.1, padding ignored, summed and
divided by the target tokens), backward, Adam update (torch.optim.Adam, the same settings);
dropout 0.1 at the same places (embeddings and residual branches).

Rows:
* ``attnlab-post``: ``multi30k`` dims in Marian's layout (post-LN, no final norms), carrying
  the same weights as the Marian model (checked first: same loss in eval mode), with
  attnlab's loss (``label_smoothed_cross_entropy``, fused gradient);
* ``marian``: HF ``MarianMTModel`` (d_model 256, 4 heads, d_ff 1024, 3+3 layers, shared
  tied embeddings) with torch's ``F.cross_entropy(..., label_smoothing=0.1)``, the same
  quantity, the way a HF user computes it;
* ``marian-ourloss``: the same Marian model with attnlab's loss (the models alone compared);
* ``attnlab-preset``: the ``multi30k`` preset itself (pre-LN with final norms), what the
  recipe trains.
The calls are interleaved; each timing covers all ``--batches`` batches; medians are quoted.
Memory: the peak resident set of the process is printed, not per model.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import warnings

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from common import interleaved_medians  # noqa: E402
from decode_marian import marian_from_attnlab  # noqa: E402

import attnlab  # noqa: E402
from attnlab.data import TranslationBatches, get_parallel_dataset  # noqa: E402
from attnlab.data.tokenizer import Tokenizer  # noqa: E402
from attnlab.training.losses import label_smoothed_cross_entropy  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=8, help="batches per timed run (default: 8)")
    parser.add_argument("--max-tokens", type=int, default=3072)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--tokenizer", help="a sentencepiece model (default: learn 8,000 BPE pieces here)")
    parser.add_argument("--no-malloc-tuning", action="store_true",
                        help="leave glibc malloc as it is (attnlab's Trainer tunes it; it affects both sides)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.no_malloc_tuning:
        from attnlab.training.allocator import tune_allocator
        tune_allocator()
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()

    corpus = get_parallel_dataset("multi30k", "train", "de", "en")
    if args.tokenizer:
        tokenizer = Tokenizer.load(args.tokenizer)
    else:
        tokenizer = Tokenizer.train(itertools.chain(corpus.sources, corpus.targets), vocab_size=8000)
    examples = [pair for pair in tokenizer.encode_pairs(corpus) if pair[0] and pair[1]]
    source = TranslationBatches(examples, args.max_tokens, seed=0, pad_id=tokenizer.pad_id,
                                bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id)
    batches = list(itertools.islice(iter(source), args.batches))
    target_tokens = sum(int((b["tgt_out"] != tokenizer.pad_id).sum()) for b in batches)
    padded = sum(b["src"].numel() + b["tgt_in"].numel() for b in batches)

    special = dict(vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id, bos_id=tokenizer.bos_id,
                   eos_id=tokenizer.eos_id)
    torch.manual_seed(0)
    post = attnlab.create_model("multi30k", norm_first=False, final_norm=False, **special)
    peer = marian_from_attnlab(post, dropout=post.config.dropout)
    torch.manual_seed(0)
    preset = attnlab.create_model("multi30k", **special)
    pad = tokenizer.pad_id

    def loss_of(logits, batch):
        loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], epsilon=0.1, ignore_index=pad)
        return loss.loss_sum / loss.num_tokens

    def torch_loss_of(logits, batch):
        target = batch["tgt_out"].reshape(-1)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target, ignore_index=pad,
                               label_smoothing=0.1, reduction="sum") / int((target != pad).sum())

    def ours_logits(model):
        return lambda batch: model(batch["src"], batch["tgt_in"])

    def marian_logits(model):
        return lambda batch: model(input_ids=batch["src"], attention_mask=(batch["src"] != pad).long(),
                                   decoder_input_ids=batch["tgt_in"]).logits

    # Like for like: the same weights give the same loss (eval mode: no dropout).
    post.eval(), peer.eval()
    with torch.no_grad():
        ours_loss = float(loss_of(ours_logits(post)(batches[0]), batches[0]))
        peer_loss = float(torch_loss_of(marian_logits(peer)(batches[0]), batches[0]))
    print(f"same weights, eval mode, first batch: loss attnlab {ours_loss:.6f}, Marian + torch loss {peer_loss:.6f}")
    if abs(ours_loss - peer_loss) > 1e-4:
        raise SystemExit("the two models disagree: the comparison is not like for like")

    def trainer(model, logits_fn, loss_fn=loss_of):
        model.train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

        def run():
            for batch in batches:
                optimizer.zero_grad(set_to_none=True)
                loss_fn(logits_fn(batch), batch).backward()
                optimizer.step()
        return run

    # Marian's weights are a copy, so the two Marian rows train separate copies too.
    peer_copy = marian_from_attnlab(post, dropout=post.config.dropout)
    runs = {"attnlab-post": trainer(post, ours_logits(post)),
            "marian": trainer(peer, marian_logits(peer), torch_loss_of),
            "marian-ourloss": trainer(peer_copy, marian_logits(peer_copy)),
            "attnlab-preset": trainer(preset, ours_logits(preset))}
    medians = interleaved_medians(runs, repeats=args.repeats)
    print(f"{args.batches} Multi30k batches of <= {args.max_tokens} padded tokens ({target_tokens} target tokens, "
          f"{padded} padded source+target positions), vocab {tokenizer.vocab_size}, "
          f"threads {torch.get_num_threads()}, malloc tuning {'off' if args.no_malloc_tuning else 'on'}, "
          f"median of {args.repeats}")
    for name, seconds in medians.items():
        print(f"  {name:15s} {seconds:7.3f} s  {target_tokens / seconds:8.0f} target tokens/s")
    print(f"  attnlab-post / marian (tokens/s): {medians['marian'] / medians['attnlab-post']:.2f}x; "
          f"attnlab-post / marian-ourloss: {medians['marian-ourloss'] / medians['attnlab-post']:.2f}x; "
          f"attnlab-preset / marian: {medians['marian'] / medians['attnlab-preset']:.2f}x")
    try:
        import resource
        print(f"  peak resident memory of the process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    except ImportError:
        pass


if __name__ == "__main__":
    main()
