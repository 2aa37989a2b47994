"""Import timm (a test-only dependency) for parity tests and benchmarks.

timm needs torchvision, and the only torchvision wheel the registries offer for torch
2.13 is built against CUDA torch: with the CPU build of torch its C++ operators do not
load, and its import then fails declaring fake kernels for ``torchvision::nms``/``qnms``
(which ViT never uses). Installing that torchvision into the main environment would also
break ``import transformers`` (which imports torchvision when present), so scripts/setup.sh
installs timm and torchvision with --no-deps into ``.venv/timm-site``, which only this
loader puts on ``sys.path``, after declaring the two operator schemas when the extension
is missing.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import torch

_SITE_NAMES = ("timm-site",)
_declared = []


def timm_site() -> Path | None:
    """Where timm lies: ``$ATTNLAB_TIMM_SITE``, or ``timm-site`` beside the environment."""
    candidates = [os.environ.get("ATTNLAB_TIMM_SITE")] + [str(Path(sys.prefix) / name) for name in _SITE_NAMES]
    for candidate in candidates:
        if candidate and (Path(candidate) / "timm").is_dir():
            return Path(candidate)
    return None


def import_timm():
    """The timm module, or None when it is not installed anywhere we look."""
    if "timm" in sys.modules:
        return sys.modules["timm"]
    if importlib.util.find_spec("timm") is None:
        site = timm_site()
        if site is None:
            return None
        sys.path.append(str(site))
    if not _declared and not _torchvision_ops_load():
        library = torch.library.Library("torchvision", "FRAGMENT")
        for op in ("nms", "qnms"):
            library.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _declared.append(library)  # the declarations live as long as the library object
    import timm

    return timm


def _torchvision_ops_load() -> bool:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return True  # nothing to fix (timm's import will say what is missing)
    library = Path(spec.submodule_search_locations[0]) / "_C.so"
    try:
        torch.ops.load_library(str(library))
        return True
    except (OSError, RuntimeError):
        return False
