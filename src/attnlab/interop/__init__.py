"""Converters from other libraries: key maps plus transposes, tested for exact outputs."""

from attnlab.interop.hf_bert import from_hf_bert, load_hf_bert
from attnlab.interop.hf_gpt2 import from_hf_gpt2
from attnlab.interop.hf_marian import from_hf_marian, load_hf_marian
from attnlab.interop.timm_vit import from_timm_vit
from attnlab.interop.torch_nn import TransformerStacks, from_torch_transformer

__all__ = ["TransformerStacks", "from_hf_bert", "from_hf_gpt2", "from_hf_marian", "from_timm_vit", "load_hf_bert",
           "load_hf_marian", "from_torch_transformer"]
