"""Text and language-model data: tokenize documents, pack them into fixed-length rows,
mix corpora by weight, resume to the token.

The Hugging Face ``tokenizers`` package is the ``tokenizers`` extra
(``pip install "datarax[tokenizers]"``); a custom callable tokenizer needs nothing.
"""

from datarax.text.document_files import JsonlDocuments, ParquetDocuments
from datarax.text.documents import BadDocument, DocumentReader, FunctionDocuments, HFStreamDocuments
from datarax.text.mixing import MixedDocuments
from datarax.text.packing import Packer
from datarax.text.source import PackedTextConfig, PackedTextSource
from datarax.text.tokenize import TextTokenizer

__all__ = [
    "BadDocument",
    "DocumentReader",
    "FunctionDocuments",
    "HFStreamDocuments",
    "JsonlDocuments",
    "MixedDocuments",
    "PackedTextConfig",
    "PackedTextSource",
    "Packer",
    "ParquetDocuments",
    "TextTokenizer",
]
