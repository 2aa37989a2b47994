"""Model classes and presets. Importing this package registers every model class and preset."""

from attnlab.models.base import AttnlabModel, ModelConfig
from attnlab.models.registry import (create_model, get_preset, list_presets, load_model, register_model_class,
                                     register_preset)
from attnlab.models.transformer import Transformer, TransformerConfig
from attnlab.models.lm import DecoderLM, DecoderLMConfig
from attnlab.models.bert import BertClassifier, BertClassifierConfig, BertConfig, BertEncoder
from attnlab.models.vit import VisionTransformer, VisionTransformerConfig
from attnlab.models.captioner import Captioner, CaptionerConfig
from attnlab.models.vqvae import VQVAE, VQVAEConfig
from attnlab.models.text_to_image import TextToImage, TextToImageConfig
from attnlab.models.scene_attributes import SceneAttributeClassifier, SceneAttributeConfig
from attnlab.models.image_transformer import ImageTransformer, ImageTransformerConfig
from attnlab.models.music import MusicTransformer, MusicTransformerConfig

__all__ = ["AttnlabModel", "ModelConfig", "create_model", "get_preset", "list_presets", "load_model",
           "register_model_class", "register_preset", "Transformer", "TransformerConfig", "DecoderLM", "DecoderLMConfig",
           "BertConfig", "BertEncoder", "BertClassifier", "BertClassifierConfig", "VisionTransformer", "VisionTransformerConfig",
           "Captioner", "CaptionerConfig", "VQVAE", "VQVAEConfig",
           "TextToImage", "TextToImageConfig", "SceneAttributeClassifier", "SceneAttributeConfig",
           "ImageTransformer", "ImageTransformerConfig",
           "MusicTransformer", "MusicTransformerConfig"]
