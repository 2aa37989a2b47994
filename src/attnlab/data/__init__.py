"""Data: parallel corpora, named data sets, subword tokenizers, token-count batching."""

from attnlab.data.batching import (
    LengthFilterResult,
    TokenBatchSampler,
    TranslationBatches,
    collate_translation,
    filter_by_length,
)
from attnlab.data.parallel import ParallelCorpus, read_lines, read_parallel
from attnlab.data.registry import (
    data_root,
    download_multi30k,
    get_parallel_dataset,
    list_parallel_datasets,
    register_parallel_dataset,
)
from attnlab.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, TOKENIZER_FILE, UNK_ID, Tokenizer
from attnlab.data.trans_de_en import extract_example_pairs, load_trans_de_en

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "TOKENIZER_FILE",
    "UNK_ID",
    "LengthFilterResult",
    "ParallelCorpus",
    "TokenBatchSampler",
    "Tokenizer",
    "TranslationBatches",
    "collate_translation",
    "data_root",
    "download_multi30k",
    "extract_example_pairs",
    "filter_by_length",
    "get_parallel_dataset",
    "list_parallel_datasets",
    "load_trans_de_en",
    "read_lines",
    "read_parallel",
    "register_parallel_dataset",
]
