"""Bounds on what a caller, a command line or a file it reads may ask of decoding, shared by
the CLI's argument types (:mod:`attnlab.cli.options`), the pipelines' argument checks
(:mod:`attnlab.pipelines.base`) and the loaders of other libraries' sidecars
(a MarianMT ``generation_config.json``). Imports nothing, so every layer may use it."""

MAX_BEAM = 64  # beam search keeps 2 x beam hypotheses per input on the device
MAX_TEMPERATURE = 100.0  # sampling temperature: above 0; past 100 every draw is uniform
MAX_SEED = 2**63 - 1  # torch.manual_seed takes a 64-bit integer
MAX_IMAGES = 4096  # the images one command or call draws (imagine, sample-images)

__all__ = ["MAX_BEAM", "MAX_IMAGES", "MAX_SEED", "MAX_TEMPERATURE"]
