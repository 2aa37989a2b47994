"""A VQ-VAE image tokenizer (van den Oord et al. 2017, "Neural Discrete Representation Learning").

    images (B, 3, S, S) in [-1, 1]
      -> encoder: [4x4 conv stride 2, ReLU] x log2(downsample), 3x3 conv, residual block,
         1x1 conv to code_dim                                     z_e (B, D, S/f, S/f)
      -> nearest codebook vector per cell (K vectors of D)        codes (B, S/f, S/f) in [0, K)
      -> straight-through: z_q = z_e + sg(e_code - z_e)           (the decoder's gradient reaches
                                                                   the encoder unchanged)
      -> decoder: 3x3 conv, residual block, [4x4 transposed conv stride 2] x log2(f) -> images

Codebook updates: exponential moving averages of the assigned encoder outputs (the
paper's appendix A.1; decay ``ema_decay``), so the loss is reconstruction MSE +
``commitment`` * ||z_e - sg(e)||^2. Dead codes (an EMA count below ``dead_threshold``) are
restarted, during training, at encoder outputs of the current batch. With 32x32 scenes
and ``downsample=4`` an image is an 8x8 grid of tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.models.base import AttnlabModel, ModelConfig, check_images
from attnlab.models.registry import register_model_class, register_preset


@dataclass(frozen=True)
class VQVAEConfig(ModelConfig):
    """Configuration of a :class:`VQVAE` (see the module docstring)."""

    family: ClassVar[str] = "vqvae"

    image_size: int = 32
    in_channels: int = 3
    hidden: int = 64
    codebook_size: int = 512
    code_dim: int = 32
    downsample: int = 4
    commitment: float = 0.25
    ema_decay: float = 0.99
    dead_threshold: float = 0.01

    def __post_init__(self):
        for name in ("image_size", "in_channels", "hidden", "codebook_size", "code_dim", "downsample"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.downsample < 2 or self.downsample & (self.downsample - 1):
            raise ValueError(f"downsample={self.downsample} must be a power of two >= 2")
        if self.image_size % self.downsample:
            raise ValueError(f"image_size={self.image_size} is not divisible by downsample={self.downsample}")
        if not 0.0 < self.ema_decay < 1.0:
            raise ValueError(f"ema_decay={self.ema_decay} must be in (0, 1)")
        if self.commitment < 0 or self.dead_threshold < 0:
            raise ValueError("commitment and dead_threshold must be >= 0")

    @property
    def grid(self) -> tuple[int, int]:
        side = self.image_size // self.downsample
        return side, side


class _Residual(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.body = nn.Sequential(nn.ReLU(), nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(channels, channels, 1))

    def forward(self, x: Tensor) -> Tensor:
        return x + self.body(x)


class VQOutput(NamedTuple):
    reconstruction: Tensor  # (B, C, H, W)
    loss: Tensor  # per-image sum of squared errors + commitment term, summed over the batch
    codes: Tensor  # (B, h, w)
    mse: Tensor  # mean squared error per pixel value, detached


@register_model_class
class VQVAE(AttnlabModel):
    """Image tokenizer: :meth:`encode` images -> codes, :meth:`decode_codes` codes -> images."""

    config_class = VQVAEConfig

    def __init__(self, config: VQVAEConfig):
        super().__init__(config)
        c = config
        steps = int(math.log2(c.downsample))
        encoder: list[nn.Module] = []
        channels = c.in_channels
        for i in range(steps):
            encoder += [nn.Conv2d(channels, c.hidden, 4, stride=2, padding=1), nn.ReLU()]
            channels = c.hidden
        encoder += [nn.Conv2d(c.hidden, c.hidden, 3, padding=1), _Residual(c.hidden), nn.ReLU(),
                    nn.Conv2d(c.hidden, c.code_dim, 1)]
        self.encoder = nn.Sequential(*encoder)
        decoder: list[nn.Module] = [nn.Conv2d(c.code_dim, c.hidden, 3, padding=1), _Residual(c.hidden)]
        for i in range(steps):
            last = i == steps - 1
            decoder += [nn.ReLU(), nn.ConvTranspose2d(c.hidden, c.in_channels if last else c.hidden, 4, stride=2,
                                                      padding=1)]
        self.decoder = nn.Sequential(*decoder)
        codebook = torch.randn(c.codebook_size, c.code_dim) * 0.1
        self.register_buffer("codebook", codebook)
        self.register_buffer("ema_count", torch.ones(c.codebook_size))
        self.register_buffer("ema_sum", codebook.clone())
        self.register_buffer("restarts", torch.zeros(()))

    # ------------------------------------------------------------------ #
    def check_images(self, images: Tensor) -> None:
        check_images(images, self.config.in_channels, self.config.image_size)

    def nearest_codes(self, z: Tensor) -> Tensor:
        """``(B, D, h, w)`` encoder outputs -> ``(B, h, w)`` ids of the nearest codebook vectors."""
        flat = z.permute(0, 2, 3, 1).reshape(-1, z.shape[1])
        distances = (flat.pow(2).sum(1, keepdim=True) - 2 * flat @ self.codebook.t()
                     + self.codebook.pow(2).sum(1)[None])
        return distances.argmin(1).view(z.shape[0], z.shape[2], z.shape[3])

    def lookup(self, codes: Tensor) -> Tensor:
        """``(B, h, w)`` ids -> ``(B, D, h, w)`` codebook vectors."""
        return F.embedding(codes, self.codebook).permute(0, 3, 1, 2)

    @torch.no_grad()
    def encode(self, images: Tensor) -> Tensor:
        """``(B, C, S, S)`` in [-1, 1] -> codes ``(B, h, w)``."""
        self.check_images(images)
        return self.nearest_codes(self.encoder(images))

    @torch.no_grad()
    def decode_codes(self, codes: Tensor) -> Tensor:
        """Codes ``(B, h, w)`` -> images ``(B, C, S, S)`` (clamped to [-1, 1])."""
        if codes.dim() != 3 or tuple(codes.shape[1:]) != self.config.grid:
            raise ValueError(f"codes must be (batch, {self.config.grid[0]}, {self.config.grid[1]}), "
                             f"got {tuple(codes.shape)}")
        if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= self.config.codebook_size):
            raise ValueError(f"codes must be in [0, {self.config.codebook_size})")
        return self.decoder(self.lookup(codes)).clamp(-1.0, 1.0)

    def forward(self, images: Tensor) -> VQOutput:
        """Reconstruct through the codebook (straight-through); in training mode also update
        the codebook (EMA) and restart dead codes."""
        self.check_images(images)
        z = self.encoder(images)
        codes = self.nearest_codes(z.detach())
        quantized = self.lookup(codes)
        if self.training:
            self._update_codebook(z.detach(), codes)
        straight = z + (quantized - z).detach()
        reconstruction = self.decoder(straight)
        squared = (reconstruction - images).pow(2)
        commitment = (z - quantized.detach()).pow(2)
        loss = squared.flatten(1).sum(1).sum() + self.config.commitment * commitment.flatten(1).sum(1).sum()
        return VQOutput(reconstruction, loss, codes, squared.detach().mean())

    @torch.no_grad()
    def _update_codebook(self, z: Tensor, codes: Tensor) -> None:
        c = self.config
        flat = z.permute(0, 2, 3, 1).reshape(-1, c.code_dim)
        onehot = F.one_hot(codes.reshape(-1), c.codebook_size).to(flat.dtype)
        self.ema_count.mul_(c.ema_decay).add_(onehot.sum(0), alpha=1 - c.ema_decay)
        self.ema_sum.mul_(c.ema_decay).add_(onehot.t() @ flat, alpha=1 - c.ema_decay)
        total = self.ema_count.sum()
        count = (self.ema_count + 1e-5) / (total + c.codebook_size * 1e-5) * total  # Laplace smoothing
        self.codebook.copy_(self.ema_sum / count[:, None])
        dead = torch.nonzero(self.ema_count < c.dead_threshold).flatten()
        if dead.numel():
            picks = torch.randint(0, flat.shape[0], (dead.numel(),), device=flat.device)
            self.codebook[dead] = flat[picks]
            self.ema_sum[dead] = flat[picks]
            self.ema_count[dead] = 1.0
            self.restarts += dead.numel()

    @torch.no_grad()
    def codebook_usage(self, codes: Tensor) -> dict[str, float]:
        """How many codes ``codes`` use and the perplexity of their distribution."""
        counts = torch.bincount(codes.reshape(-1), minlength=self.config.codebook_size).double()
        p = counts / counts.sum()
        entropy = -(p[p > 0] * p[p > 0].log()).sum()
        return {"codes_used": int((counts > 0).sum()), "perplexity": float(entropy.exp())}


def psnr(reconstruction: Tensor, images: Tensor) -> float:
    """Peak signal-to-noise ratio in dB of images in [-1, 1], on the 0-255 pixel scale
    (reconstructions clamped to the range and rounded to whole pixel values)."""
    a = ((reconstruction.clamp(-1, 1) + 1) * 127.5).round().double()
    b = ((images + 1) * 127.5).round().double()
    mse = float((a - b).pow(2).mean())
    return float("inf") if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


@register_preset
def vqvae_scenes() -> VQVAEConfig:
    """32x32 scenes -> 8x8 tokens from a codebook of 512 (hidden 64, codes of 32)."""
    return VQVAEConfig()


@register_preset
def vqvae_tiny() -> VQVAEConfig:
    """A tiny VQ-VAE for tests: hidden 16, codebook 32, codes of 8."""
    return VQVAEConfig(hidden=16, codebook_size=32, code_dim=8)


__all__ = ["VQVAE", "VQVAEConfig", "VQOutput", "psnr", "vqvae_scenes", "vqvae_tiny"]
