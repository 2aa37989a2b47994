"""Text classification with a BERT (Devlin et al. 2019, §4.1): labelled texts -> WordPiece
batches -> [CLS]-pooled logits -> cross-entropy; prediction and evaluation.

* :class:`LabelledBatches`: the resumable batch source (shuffled each epoch by its own
  seeded generator; each batch tokenized when it is drawn, single texts or pairs);
* :func:`classification_loss`: summed cross-entropy with the NLL and the correct
  predictions as logs (the trainer's ``valid_correct`` is the held-out accuracy);
* :func:`predict`: label probabilities of raw texts, as ``classify-text``, the pipeline
  and the evaluation compute them;
* :func:`evaluate`: accuracy, macro-F1, per-class precision/recall and the confusion
  matrix (attnlab.evaluation.classification), :func:`write_evaluation` their
  ``results.json`` and ``confusion_matrix.png``;
* :func:`load_text_classifier`: a trained classifier directory (config family
  ``bert_classifier``: config.json, model.safetensors, vocab.txt, tokenizer_config.json and
  ``labels.json``).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

from attnlab.training.batches import EpochPosition

__all__ = ["LABELS_FILE", "LabelledBatches", "classification_loss", "predict", "evaluate", "write_evaluation",
           "load_text_classifier", "labels_file_bytes"]

LABELS_FILE = "labels.json"
EVALUATION_FILES = ("results.json", "confusion_matrix.png")


def labels_file_bytes(labels: list[str], pairs: bool) -> bytes:
    """``labels.json``: the label of each output, in order, and whether inputs are text pairs."""
    return (json.dumps({"labels": labels, "pairs": pairs}, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def read_labels_file(directory: Path, num_labels: int) -> tuple[list[str], bool]:
    from attnlab.files import read_json_object

    path = Path(directory) / LABELS_FILE
    if not path.is_file():
        raise ValueError(f"{path}: no such file; a text classifier's directory names its labels there")
    values = read_json_object(path, max_bytes=64 << 20, what='a JSON object {"labels": [...], "pairs": false}')
    labels, pairs = values.get("labels"), values.get("pairs", False)
    if not isinstance(labels, list) or not all(isinstance(label, str) and label for label in labels) \
            or len(set(labels)) != len(labels):
        raise ValueError(f"{path}: \"labels\" must be a list of distinct non-empty strings")
    if not isinstance(pairs, bool):
        raise ValueError(f"{path}: \"pairs\" must be true or false")
    if len(labels) != num_labels:
        raise ValueError(f"{path}: names {len(labels)} labels, but the model has {num_labels} outputs; the file does "
                         "not belong to this model")
    return labels, pairs


def load_text_classifier(directory, *, device: str = "cpu", flag: str = "--model"):
    """``(model, tokenizer, labels, pairs)`` of a text classifier directory; a ValueError
    naming ``flag`` for a directory of another family (saying which verb uses it)."""
    from attnlab.families import family_for_directory, used_with
    from attnlab.interop.hf_bert import load_wordpiece
    from attnlab.models.registry import load_model, require_model_directory

    directory = require_model_directory(directory, flag)
    family = family_for_directory(directory)
    if family is None or family.config_family != "bert_classifier":
        what = f"a {family.title} ({family.config_family!r})" if family is not None else "no attnlab model"
        raise ValueError(f"{flag} {directory}: holds {what}, not a text classifier (attnlab train text-classification "
                         f"writes one){used_with(family.config_family) if family is not None else ''}")
    try:
        model = load_model(directory, device=device)
        labels, pairs = read_labels_file(directory, model.config.num_labels)
        tokenizer = load_wordpiece(directory, model.config)
    except ValueError as error:
        raise ValueError(f"{flag}: {error}") from None
    return model, tokenizer, labels, pairs


class LabelledBatches(EpochPosition):
    """``{"ids", "attention_mask", "token_type_ids", "labels"}`` batches of labelled texts
    (``label_ids`` indexes the label set), shuffled each epoch (``randperm(seed + epoch)``)."""

    def __init__(self, texts: list[str], pairs: list[str] | None, label_ids: list[int], tokenizer, *,
                 batch_size: int, seed: int = 0, shuffle: bool = True):
        if not texts:
            raise ValueError("no labelled texts to batch")
        self.texts, self.pairs, self.label_ids, self.tokenizer = texts, pairs, torch.tensor(label_ids), tokenizer
        self.batch_size, self.seed, self.shuffle = batch_size, seed, shuffle

    def __len__(self) -> int:
        return -(-len(self.texts) // self.batch_size)

    def __iter__(self):
        if self.position >= len(self):
            self.epoch, self.position = self.epoch + 1, 0
        order = (torch.randperm(len(self.texts), generator=torch.Generator().manual_seed(self.seed + self.epoch))
                 if self.shuffle else torch.arange(len(self.texts)))
        while self.position < len(self):
            rows = order[self.position * self.batch_size:(self.position + 1) * self.batch_size].tolist()
            self.position += 1
            yield self.batch(rows)

    def batch(self, rows: list[int]) -> dict[str, Tensor]:
        batch, _ = self.tokenizer.encode([self.texts[i] for i in rows],
                                         None if self.pairs is None else [self.pairs[i] for i in rows])
        batch["labels"] = self.label_ids[rows]
        return batch


def classification_loss(model, batch: dict[str, Tensor]):
    """``(loss_sum, texts, {"nll": sum, "correct": count})`` for the shared Trainer."""
    import torch.nn.functional as F

    logits = model.classify(batch["ids"], attention_mask=batch["attention_mask"],
                            token_type_ids=batch["token_type_ids"]).float()
    loss = F.cross_entropy(logits, batch["labels"], reduction="sum")
    correct = (logits.detach().argmax(-1) == batch["labels"]).sum()
    return loss, len(batch["labels"]), {"nll": loss.detach(), "correct": correct}


@torch.no_grad()
def predict(model, tokenizer, texts: list[str], pairs: list[str] | None = None, *, batch_size: int = 32,
            progress=None) -> Tensor:
    """Label probabilities ``(N, num_labels)`` (float32, CPU) of ``texts`` (and ``pairs``), in
    their order; ``progress(n)`` is called after each batch of n texts. The texts are batched
    by length (longest first), so a batch pads little; padding is masked, so the order
    changes no probability beyond float rounding."""
    model.eval()
    device = next(model.parameters()).device
    sizes = [len(text) + (len(pairs[i]) if pairs is not None else 0) for i, text in enumerate(texts)]
    order = sorted(range(len(texts)), key=lambda i: -sizes[i])
    result = torch.zeros(len(texts), model.config.num_labels)
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        batch, _ = tokenizer.encode([texts[i] for i in rows], None if pairs is None else [pairs[i] for i in rows])
        batch = {name: value.to(device) for name, value in batch.items()}
        logits = model.classify(batch["ids"], attention_mask=batch["attention_mask"],
                                token_type_ids=batch["token_type_ids"])
        result[rows] = logits.float().softmax(-1).cpu()
        if progress is not None:
            progress(len(rows))
    return result


def evaluate(model, tokenizer, data, labels: list[str], *, batch_size: int = 32, rows=None,
             progress=None) -> tuple[dict, Tensor]:
    """``(scores, confusion)`` of ``model`` on the labelled texts ``data`` (the rows ``rows``,
    default all): :func:`attnlab.evaluation.classification.classification_scores`."""
    from attnlab.evaluation.classification import classification_scores, confusion_matrix

    rows = list(range(len(data))) if rows is None else list(rows)
    index = {label: i for i, label in enumerate(labels)}
    probabilities = predict(model, tokenizer, [data.texts[i] for i in rows],
                            None if data.pairs is None else [data.pairs[i] for i in rows], batch_size=batch_size,
                            progress=progress)
    true = torch.tensor([index[data.labels[i]] for i in rows], dtype=torch.long)
    confusion = confusion_matrix(true, probabilities.argmax(-1), len(labels))
    return classification_scores(confusion, labels), confusion


def summary(scores: dict) -> str:
    """The printed lines: accuracy, macro-F1, then per class precision/recall/F1 (support)."""
    lines = [f"accuracy {100 * scores['accuracy']:.2f}%, macro-F1 {100 * scores['macro_f1']:.2f}% "
             f"({scores['items']:,d} texts)"]
    width = max([12, *(len(name) for name in scores["per_class"])])
    for name, values in scores["per_class"].items():
        lines.append(f"  {name:>{width}}: precision {100 * values['precision']:6.2f}%  recall "
                     f"{100 * values['recall']:6.2f}%  F1 {100 * values['f1']:6.2f}%  ({values['support']:,d})")
    return "\n".join(lines)


def write_evaluation(scores: dict, confusion: Tensor, labels: list[str], directory: Path, *, data: str,
                     extra: dict | None = None) -> None:
    """``results.json`` (the scores, the confusion matrix, ``extra``) and ``confusion_matrix.png``
    in ``directory`` (written atomically; the caller checked the output rule)."""
    from attnlab.files import atomic_write_json, json_safe
    from attnlab.viz.confusion import plot_confusion_matrix

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    results = {"data": data, **scores, "labels": labels, "confusion_matrix": confusion.tolist(), **(extra or {})}
    atomic_write_json(directory / "results.json", json_safe(results), indent=2)
    plot_confusion_matrix(confusion, labels, directory / "confusion_matrix.png",
                          title=f"{Path(data).name}: accuracy {100 * scores['accuracy']:.2f}%, "
                                f"macro-F1 {100 * scores['macro_f1']:.2f}%")
