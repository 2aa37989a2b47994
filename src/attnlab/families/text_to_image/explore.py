"""The text-to-image model in the explorer: for a prompt (``analyse``'s text) the model
draws its image tokens (sampled as ``attnlab imagine`` does: temperature 1, top-k 32,
seed 0 unless told), and the page shows its causal self-attention over
``[text slots; image tokens]`` (the text slots padded to the model's ``text_length``, as
the model reads them), with attention to image tokens drawn over the image the VQ-VAE
decodes from them."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from attnlab.viz.explorer.inputs import ImageView, cell_labels, grid_cells
from attnlab.viz.explorer.maps import Analysis, AttentionGroup, _check_text, attention_maps

__all__ = ["TextToImageSource", "load_source"]


class TextToImageSource:
    """A text-to-image model with its VQ-VAE and tokenizer. Tokens: the text slots' pieces
    (``<s>``, the prompt, ``</s>``, ``<pad>``...), then "image (r,c)" for each image token
    the model reads (every one but the last, which it only predicts)."""

    family = "text_to_image"

    def __init__(self, pipeline):
        self.pipeline = pipeline
        c = pipeline.model.config
        self.max_tokens = c.text_length + c.image_tokens - 1
        self.description = (f"text-to-image decoder: {c.num_layers} layers x {c.num_heads} heads, d_model={c.d_model}, "
                            f"{c.text_length} text slots + {c.grid}x{c.grid} image tokens")
        self.default_text = self._fitting_default()

    DEFAULT_TEXTS = ("a red circle above a blue square", "a red circle", "red")

    def _fitting_default(self) -> str:
        from attnlab.families.text_to_image.task import encode_prompt

        for text in self.DEFAULT_TEXTS:
            try:
                encode_prompt(self.pipeline.tokenizer, text, self.pipeline.model.config.text_length)
                return text
            except ValueError:
                continue
        return ""

    def analyse(self, text: str, *, seed: int = 0, temperature: float = 1.0, top_k: int | None = 32,
                **options) -> Analysis:
        """Draw the image tokens for the prompt ``text``, then show the model reading them."""
        from attnlab.generation import generate
        from attnlab.families.text_to_image.task import encode_prompt

        text = _check_text(text, 2000)
        model = self.pipeline.model
        c = model.config
        row = encode_prompt(self.pipeline.tokenizer, text, c.text_length)
        generator = torch.Generator(device=self.pipeline.device).manual_seed(seed)
        tokens = generate(model, [row], max_new_tokens=c.image_tokens, temperature=temperature, top_k=top_k,
                          generator=generator)[0]
        codes = torch.tensor([tokens]) - c.text_vocab_size
        return self.analyse_codes(text, codes.view(1, c.grid, c.grid))

    def analyse_codes(self, prompt: str, codes: Tensor) -> Analysis:
        """The model reading ``prompt`` and the image tokens ``codes`` ``(1, grid, grid)``, teacher-forced."""
        from attnlab.families.text_to_image.task import encode_prompt

        pipeline, model = self.pipeline, self.pipeline.model
        c = model.config
        row = encode_prompt(pipeline.tokenizer, prompt, c.text_length)
        codes = codes.reshape(1, c.grid, c.grid).to(pipeline.device)
        maps = attention_maps(model, text_ids=torch.tensor([row], device=pipeline.device), codes=codes)
        cells = grid_cells(c.grid, c.grid)[:-1]  # the last image token is predicted, never read
        labels = pipeline.tokenizer.pieces(row) + cell_labels(cells, "image")
        key_cells = [None] * c.text_length + cells
        vqvae = pipeline.vqvae
        with torch.no_grad():
            pixels = vqvae.decode_codes(codes.to(next(vqvae.parameters()).device))
        image = ((pixels[0].float().cpu() + 1) * 127.5).round().clamp(0, 255).to(torch.uint8)
        return Analysis(prompt, [AttentionGroup("self", maps["self"], labels, labels, key_cells=key_cells,
                                                        query_cells=key_cells)],
                        output=f"drew {c.grid}x{c.grid} image tokens", image=ImageView(image, c.grid, c.grid))


def load_source(directory: Path, device: str) -> TextToImageSource:
    from attnlab.pipelines import load  # the family's pipeline, through the registry (no import cycle)

    return TextToImageSource(load(directory, device=device))


def attention(model, text_ids: Tensor, codes: Tensor):
    """This family's attention maps (its registration's ``attention``): one self-attention over
    [text; image tokens]."""
    return {"self": [w.self_attn for w in model(text_ids, codes, need_weights=True)[1]]}
