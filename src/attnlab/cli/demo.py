"""``attnlab demo``: train a tiny Transformer to reverse digit strings, then decode.

A smoke run of the whole core (model, training step, cache, greedy and beam search,
save/load) that needs no data and finishes in well under a minute on a CPU.
"""

HELP = "train a tiny Transformer to reverse sequences in seconds, then decode with greedy and beam search"


MAX_STEPS = 100_000


def add_arguments(parser) -> None:
    from attnlab.cli.options import SEED, add_force_argument, add_runtime_arguments, bounded_int

    parser.add_argument("--steps", type=bounded_int(1, MAX_STEPS), default=500, metavar="N",
                        help=f"training steps, 1 to {MAX_STEPS:,} (default: 500)")
    parser.add_argument("--seed", type=SEED, default=0, help="seed of the weights and the data (default: 0)")
    parser.add_argument("--out", default=None,
                        help="save the trained model to this directory (new, empty, or an earlier demo model)")
    add_force_argument(parser, "--out")
    add_runtime_arguments(parser)


def _demo_model(directory) -> bool:
    """Whether ``directory`` holds only what ``demo --out`` writes (an earlier demo model)."""
    return {p.name for p in directory.iterdir()} <= {"config.json", "model.safetensors"}


def run(args) -> int:
    import time

    import torch

    import attnlab
    from attnlab.cli.options import describe_device, resolve_device
    from attnlab.generation import beam_search, greedy_search

    if args.out:
        from attnlab.files import check_output_directory

        check_output_directory(args.out, force=args.force, flag="--out", own=_demo_model)
    torch.manual_seed(args.seed)
    pad, bos, eos, first_symbol, vocab = 0, 1, 2, 3, 13  # ten symbols 3..12
    device = resolve_device(args.device)
    model = attnlab.create_model("transformer_tiny", vocab_size=vocab, d_model=64, num_heads=4, d_ff=128).to(device)
    print(f"device: {describe_device(device)}")
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    # Cosine decay to zero: the last steps settle the loss near zero.
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps)
    generator = torch.Generator().manual_seed(args.seed)

    def make_batch(size: int):
        lengths = torch.randint(3, 9, (size,), generator=generator)
        src = torch.full((size, 9), pad)
        tgt_in = torch.full((size, 9), pad)
        tgt_out = torch.full((size, 9), pad)
        for i, n in enumerate(lengths.tolist()):
            seq = torch.randint(first_symbol, vocab, (n,), generator=generator)
            src[i, :n] = seq
            src[i, n] = eos
            tgt_in[i, 0] = bos
            tgt_in[i, 1:n + 1] = seq.flip(0)
            tgt_out[i, :n] = seq.flip(0)
            tgt_out[i, n] = eos
        return src.to(device), tgt_in.to(device), tgt_out.to(device)

    start = time.perf_counter()
    model.train()
    for step in range(1, args.steps + 1):
        src, tgt_in, tgt_out = make_batch(64)
        logits = model(src, tgt_in)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=pad)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 50 == 0 or step == args.steps:
            print(f"step {step:4d}  loss {loss.item():.4f}")
    print(f"trained {args.steps} steps in {time.perf_counter() - start:.1f} s")

    model.eval()
    src, _, tgt_out = make_batch(8)
    greedy = greedy_search(model, src, max_len_a=1.0, max_len_b=2)
    beams = beam_search(model, src, beam_size=4, max_len_a=1.0, max_len_b=2)
    greedy_right = beam_right = both_right = 0
    for i in range(len(src)):
        expected = [t for t in tgt_out[i].tolist() if t != pad]
        show = lambda tokens: " ".join(str(t - first_symbol) for t in tokens if t >= first_symbol)  # noqa: E731
        greedy_ok, beam_ok = greedy[i].tokens == expected, beams[i][0].tokens == expected
        greedy_right, beam_right, both_right = greedy_right + greedy_ok, beam_right + beam_ok, both_right + (
            greedy_ok and beam_ok)
        verdict = "ok" if greedy_ok and beam_ok else "WRONG: " + " and ".join(
            name for name, ok in (("greedy", greedy_ok), ("beam", beam_ok)) if not ok)
        print(f"{show(src[i].tolist()):>16s}  ->  greedy {show(greedy[i].tokens):16s} beam {show(beams[i][0].tokens):16s}"
              f" {verdict}")
    print(f"reversed exactly: greedy {greedy_right}/{len(src)}, beam search {beam_right}/{len(src)}, "
          f"both {both_right}/{len(src)}")
    if args.out:
        from attnlab.files import atomic_directory

        with atomic_directory(args.out) as temporary:  # replaced as a whole, never half-written
            model.save_pretrained(temporary)
        reloaded = attnlab.load_model(args.out, device=device)
        same = torch.equal(reloaded(src, src), model(src, src))
        print(f"saved to {args.out}; reloaded model gives identical outputs: {same}")
    return 0
