"""The text-to-image task: prompts, fidelity scoring, batches, and a tiny model that learns
to draw a few scenes' tokens from their captions."""

import pytest
import torch
from torch import nn

import attnlab
from attnlab.data.scenes import load_scenes
from attnlab.generation.sampling import generate
from attnlab.families.text_to_image.task import (TensorBatches, attribute_targets, encode_prompt, fidelity,
                                                 prompt_objects, text_to_image_loss)
from attnlab.tasks.captioning import train_caption_tokenizer


@pytest.fixture(scope="module")
def scenes():
    return load_scenes("test", count=30)


@pytest.fixture(scope="module")
def tokenizer():
    return train_caption_tokenizer(load_scenes("train", count=60).captions, 1000)


def test_encode_prompt(tokenizer):
    ids = encode_prompt(tokenizer, "a red circle above a green triangle", 16)
    assert len(ids) == 16 and ids[0] == tokenizer.bos_id and tokenizer.eos_id in ids
    assert tokenizer.decode(ids) == "a red circle above a green triangle"
    with pytest.raises(ValueError, match="text context holds 4"):
        encode_prompt(tokenizer, "a red circle above a green triangle", 6)
    with pytest.raises(ValueError, match="does not know: 'Z' 'é'"):
        encode_prompt(tokenizer, "a rébel Zircle", 16)
    with pytest.raises(ValueError, match="empty"):
        encode_prompt(tokenizer, "  ", 16)


def test_prompt_objects():
    assert prompt_objects("a small red circle to the left of a large blue square") == (
        [("red", "circle"), ("blue", "square")], (0, "to the left of", 1))
    assert prompt_objects("a red circle above a green triangle") == ([("red", "circle"), ("green", "triangle")],
                                                                     (0, "above", 1))
    assert prompt_objects("a small yellow square and a large red triangle") == (
        [("yellow", "square"), ("red", "triangle")], None)


class Oracle(nn.Module):
    """Reads the scenes' truth (looked up by the image's pixels), as a perfect classifier would."""

    def __init__(self, scenes, blind=False):
        super().__init__()
        self.targets = attribute_targets(scenes)
        self.keys = [bytes(i.numpy()) for i in scenes.images]
        self.blind = blind
        self.dummy = nn.Parameter(torch.zeros(1))

    def forward(self, images):
        pixels = ((images + 1) * 127.5).round().to(torch.uint8)
        rows = [self.keys.index(bytes(p.numpy())) for p in pixels]
        present = self.targets["present"][rows]
        logits = torch.full_like(present, -5.0) if self.blind else present * 10 - 5
        return logits, self.targets["centres"][rows]


def test_fidelity_is_one_for_the_truth_and_zero_when_blind(scenes):
    prompts = [c[0] for c in scenes.captions]
    perfect = fidelity(Oracle(scenes), scenes.images, prompts)
    assert perfect["objects"] == perfect["colours"] == perfect["shapes"] == perfect["all"] == 1.0
    assert perfect["relations"] == 1.0 and perfect["relation_prompts"] > 0
    blind = fidelity(Oracle(scenes, blind=True), scenes.images, prompts)
    assert blind["objects"] == blind["relations"] == blind["all"] == 0.0
    # the wrong image for each prompt: objects mostly missing
    shuffled = fidelity(Oracle(scenes), scenes.images.roll(1, 0), prompts)
    assert shuffled["objects"] < 0.5
    with pytest.raises(ValueError, match="prompts"):
        fidelity(Oracle(scenes), scenes.images[:3], prompts)


def test_tensor_batches_resume():
    data = {"a": torch.arange(10), "b": torch.arange(10) * 2}
    batches = TensorBatches(data, 3, seed=1)
    first = next(iter(batches))
    assert torch.equal(first["b"], first["a"] * 2)
    state = batches.state_dict()
    rest = [b["a"] for b in batches]
    again = TensorBatches(data, 3, seed=1)
    again.load_state_dict(state)
    assert all(torch.equal(x, y["a"]) for x, y in zip(rest, again))
    with pytest.raises(ValueError, match="equally long"):
        TensorBatches({"a": torch.arange(3), "b": torch.arange(4)}, 2)


def test_tiny_model_learns_to_draw_a_few_captions(tokenizer):
    torch.manual_seed(0)
    model = attnlab.create_model("text_to_image_tiny", text_vocab_size=tokenizer.vocab_size, text_length=16)
    prompts = ["a small red circle", "a large blue square to the left of a small green triangle",
               "a small yellow circle", "a large purple triangle"]
    text = torch.tensor([encode_prompt(tokenizer, p, 16) for p in prompts])
    codes = torch.randint(0, 16, (4, 4, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    for _ in range(80):
        loss, count, _ = text_to_image_loss(model, {"text": text, "codes": codes})
        optimizer.zero_grad()
        (loss / count).backward()
        optimizer.step()
    drawn = torch.tensor(generate(model, text, max_new_tokens=16, greedy=True)) - model.config.text_vocab_size
    assert torch.equal(drawn.view(4, 4, 4), codes)  # the text decides which image comes out


def test_caption_likelihood_reranking_keeps_the_captioners_favourites(tokenizer):
    from attnlab.families.text_to_image.task import caption_log_likelihood, imagine

    torch.manual_seed(0)
    model = attnlab.create_model("text_to_image_tiny", text_vocab_size=tokenizer.vocab_size, text_length=16,
                                 grid=8).eval()
    vqvae = attnlab.create_model("vqvae_tiny", codebook_size=16).eval()
    captioner = attnlab.create_model("captioner_tiny", vocab_size=tokenizer.vocab_size).eval()
    prompts = ["a small red circle", "a large blue square"]
    every = imagine(model, vqvae, tokenizer, prompts, n=6, seed=3)
    kept = imagine(model, vqvae, tokenizer, prompts, n=2, candidates=3, seed=3, rerank=(captioner, tokenizer))
    assert kept.shape == (4, 3, 32, 32)
    for k, prompt in enumerate(prompts):
        scores = caption_log_likelihood(captioner, tokenizer, every[6 * k:6 * k + 6], prompt)
        best = every[6 * k:6 * k + 6][scores.argsort(descending=True)[:2]]
        assert torch.equal(kept[2 * k:2 * k + 2], best)
    # the score is the teacher-forced log-likelihood: it equals the sum over the caption's tokens
    ids = tokenizer.encode(prompts[0])
    with torch.no_grad():
        logits = captioner(((every[:1].float() / 127.5) - 1), torch.tensor([[1] + ids])).log_softmax(-1)[0]
    expected = sum(float(logits[t, token]) for t, token in enumerate(ids + [2]))
    assert float(caption_log_likelihood(captioner, tokenizer, every[:1], prompts[0])[0]) == pytest.approx(expected, rel=1e-5)
