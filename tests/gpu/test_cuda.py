"""What only a CUDA GPU can show (skipped elsewhere; on a GPU machine: ``pytest -m gpu tests/gpu``)."""

import pytest
import torch

import attnlab
from attnlab.training import ListBatchSource, TrainConfig, Trainer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _model():
    torch.manual_seed(0)
    return attnlab.create_model("transformer_tiny", vocab_size=50).cuda()


def test_forward_never_waits_for_the_gpu():
    """The token-id check asserts on the device: no host synchronisation in a forward."""
    model = _model()
    src = torch.randint(4, 50, (3, 7), device="cuda")
    tgt = torch.randint(4, 50, (3, 5), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        model(src, tgt)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_an_out_of_range_id_still_fails_on_the_gpu():
    """A device-side assert ends the CUDA context of its process, so it runs in its own."""
    import subprocess
    import sys

    code = ("import torch, attnlab\n"
            "model = attnlab.create_model('transformer_tiny', vocab_size=50).cuda()\n"
            "model(torch.full((1, 3), 50, device='cuda'), torch.full((1, 2), 5, device='cuda'))\n"
            "torch.cuda.synchronize()\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "outside the vocabulary [0, 50)" in result.stderr


def _loss(model, batch):
    logits = model(batch["src"], batch["tgt"][:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), batch["tgt"][:, 1:].flatten(),
                                             reduction="sum")
    return loss, batch["tgt"][:, 1:].numel(), {}


@pytest.mark.parametrize("bf16, compile", [(False, False), (True, False), (True, True)])
def test_training_on_the_gpu_lowers_the_loss(tmp_path, bf16, compile):
    generator = torch.Generator().manual_seed(0)
    batches = [{"src": torch.randint(4, 50, (8, 6), generator=generator),
                "tgt": torch.randint(4, 50, (8, 7), generator=generator)} for _ in range(2)]
    model = _model()
    config = TrainConfig(out_dir=str(tmp_path), max_steps=60, schedule="cosine", peak_lr=3e-3, warmup_steps=5,
                         log_every=10, progress_bar=False, bf16=bf16, compile=compile)
    trainer = Trainer(model, _loss, ListBatchSource(batches, shuffle=False), config)
    last = trainer.train()
    assert last["loss"] < 3.0  # from ln(50) = 3.9: the tiny batches are being memorised


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_graph_greedy_equals_eager(dtype):
    from attnlab.generation import generate
    from attnlab.generation.graphs import greedy_fixed_shape
    from attnlab.generation.sampling import _left_pad

    torch.manual_seed(0)
    model = attnlab.create_model("lm_char_small", vocab_size=97).cuda().to(dtype).eval()
    prompts = [[5, 9, 2], [1, 2, 3, 4, 5, 6, 7, 8], [40]]
    ids, mask = _left_pad(prompts, model.config.pad_id, torch.device("cuda"))
    graphed = greedy_fixed_shape(model, ids, mask, 64, use_graph=True).tolist()
    eager = greedy_fixed_shape(model, ids, mask, 64, use_graph=False).tolist()
    assert graphed == eager
    assert generate(model, prompts, max_new_tokens=64, greedy=True) == graphed  # generate takes the graph
    if dtype == torch.float32:  # the ordinary prefix-only loop (on_token forces it) agrees in float32
        assert generate(model, prompts, max_new_tokens=64, greedy=True, on_token=lambda row, token: None) == graphed



def test_kept_cuda_graphs_replay_across_calls():
    """GreedyGraphs: a bucket's graph, captured on the first call, replayed by later calls of
    other sizes in the same bucket (cache reset in place), equals the eager pool."""
    from attnlab.generation.graphs import GreedyGraphs
    from attnlab.generation.sampling import _left_pad

    torch.manual_seed(0)
    model = attnlab.create_model("lm_char_small", vocab_size=97).cuda().eval()
    graphs = GreedyGraphs(model, batch_buckets=(1, 4), length_multiple=64, use_graph=True)
    eager = GreedyGraphs(model, batch_buckets=(1, 4), length_multiple=64, use_graph=False)
    calls = [([[5, 9, 2], [1, 2, 3, 4, 5, 6, 7, 8], [40]], 40), ([[7, 7]], 30), ([[3, 1, 4], [1, 5, 9]], 50),
             ([[2] * 20, [3], [4, 5], [6]], 20)]
    for prompts, new in calls:
        ids, mask = _left_pad(prompts, model.config.pad_id, torch.device("cuda"))
        assert graphs(ids, mask, new).tolist() == eager(ids, mask, new).tolist()
    assert len(graphs) == 2 and all(capture.graph is not None for capture in graphs._captures.values())

def test_cuda_graph_beam_search_equals_eager():
    from attnlab.generation import beam_search
    from attnlab.generation.graphs import beam_search_fixed_shape

    model = _model().eval()
    generator = torch.Generator().manual_seed(3)
    src = torch.randint(3, 50, (12, 9), generator=generator)
    src[::3, 5:] = 0  # some padded sources
    src = src.cuda()
    graphed = beam_search(model, src, beam_size=4, nbest=4, cuda_graph=True)
    eager = beam_search_fixed_shape(model, src, beam_size=4, nbest=4, use_graph=False)
    reference = beam_search(model, src, beam_size=4, nbest=4)
    for a, b, c in zip(graphed, eager, reference, strict=True):
        assert [h.tokens for h in a] == [h.tokens for h in b] == [h.tokens for h in c]


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_flash_kernel_equals_the_reference(causal):
    """attend_varlen on CUDA in bf16 (torch's varlen_attn) against its own reference path
    (the re-padded masked call) in float32 on the same inputs."""
    from attnlab.attention.varlen import Segments, _flash_varlen, attend_varlen, pack_right_padded

    if _flash_varlen() is None:
        pytest.skip("this torch has no torch.nn.attention.varlen")
    torch.manual_seed(0)
    real = torch.arange(40, device="cuda")[None, :] < torch.tensor([40, 7, 23, 1], device="cuda")[:, None]
    packing = pack_right_padded(real, "x")
    q, k, v = (torch.randn(1, 4, packing.tokens, 64, device="cuda") for _ in range(3))
    segments = Segments(packing, packing)
    flash, _ = attend_varlen(q.bfloat16(), k.bfloat16(), v.bfloat16(), segments, causal=causal)
    reference, _ = attend_varlen(q, k, v, segments, causal=causal)
    # bf16 keeps 8 bits of mantissa (~4e-3 relative per rounding); inputs, scores and the
    # output of size ~1 are each rounded once or twice: 3e-2 holds with room.
    torch.testing.assert_close(flash.float(), reference, rtol=0, atol=3e-2)


def test_varlen_training_loss_on_cuda_equals_padded():
    from attnlab.families.translation.task import translation_loss

    torch.manual_seed(0)
    model = attnlab.create_model("transformer_tiny", dropout=0.0, d_model=64, num_heads=2).cuda().eval()
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0], [11, 2, 0, 0, 0]], device="cuda")
    tgt_in = torch.tensor([[1, 12, 13, 14], [1, 15, 0, 0], [1, 16, 17, 0]], device="cuda")
    batch = {"src": src, "tgt_in": tgt_in, "tgt_out": torch.roll(tgt_in, -1, 1).masked_fill(tgt_in == 0, 0)}
    with torch.autocast("cuda", dtype=torch.bfloat16):
        padded = translation_loss(0.1)(model, batch)[0].float()
        packed = translation_loss(0.1, varlen=True)(model, batch)[0].float()
    torch.testing.assert_close(packed, padded, rtol=2e-2, atol=0)


def test_kept_beam_graphs_replay_across_calls():
    """BeamGraphs: captured on a bucket's first call, replayed by later calls of other batch
    sizes, source lengths and limits in the same bucket; equals the eager pool."""
    from attnlab.generation.graphs import BeamGraphs
    from tests.generation.test_search import sources

    torch.manual_seed(0)
    model = attnlab.create_model("transformer_tiny", vocab_size=50).cuda().eval()
    graphs = BeamGraphs(model, batch_buckets=(2, 4), length_multiple=8, use_graph=True)
    eager = BeamGraphs(model, batch_buckets=(2, 4), length_multiple=8, use_graph=False)
    for lengths, seed, max_len_b in [([5, 3, 7], 1, 5), ([6, 6, 1, 4], 3, 5), ([1, 8, 3], 6, 2), ([2], 2, 4)]:
        src = sources(lengths, seed, vocab=50).cuda()
        got = graphs(src, beam_size=3, nbest=3, max_len_b=max_len_b)
        want = eager(src, beam_size=3, nbest=3, max_len_b=max_len_b)
        assert [[h.tokens for h in row] for row in got] == [[h.tokens for h in row] for row in want]
    assert len(graphs) == 2 and all(capture.graph is not None for capture in graphs._captures.values())


def test_translate_cli_cuda_graph_gives_the_eager_translations(tmp_path, capsys):
    """`attnlab translate --cuda-graph` on a GPU: the same lines as without it."""
    from attnlab.cli.main import main
    from attnlab.data import Tokenizer

    torch.manual_seed(0)
    texts = ["ein hund läuft .", "a dog runs .", "zwei katzen schlafen .", "two cats sleep ."] * 10
    tokenizer = Tokenizer.train(texts, vocab_size=40)
    model = attnlab.create_model("transformer_tiny", vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id,
                                 bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save(tmp_path / "model")
    source = tmp_path / "in.de"
    source.write_text("ein hund läuft .\nzwei katzen schlafen .\nein hund schläft .\n", encoding="utf-8")
    outputs = []
    for extra in ([], ["--cuda-graph"]):
        out = tmp_path / f"out{len(extra)}.en"
        assert main(["translate", "--model", str(tmp_path / "model"), "--input", str(source), "-o", str(out),
                     "--device", "cuda", *extra]) == 0
        outputs.append(out.read_text(encoding="utf-8"))
    assert outputs[0] == outputs[1] and outputs[0].count("\n") == 3
