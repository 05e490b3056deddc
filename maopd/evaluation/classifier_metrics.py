"""Figures of a binary classifier against binary labels: the judge gate's statistics.

* balanced accuracy = (TPR + TNR) / 2, the mean of the recall on positives and on negatives:
  0.5 for any constant classifier, whatever the class balance;
* ROC AUC = P(score of a random positive > score of a random negative), ties counting one half
  (the Mann–Whitney U statistic divided by n_pos · n_neg), counted over every pair.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def balanced_accuracy(labels: Sequence[bool], predictions: Sequence[bool]) -> float | None:
    """(TPR + TNR) / 2; None unless both classes occur among ``labels``."""
    truth, said = np.asarray(labels, dtype=bool), np.asarray(predictions, dtype=bool)
    if truth.all() or not truth.any():
        return None
    return float((said[truth].mean() + (~said[~truth]).mean()) / 2)


def roc_auc(labels: Sequence[bool], scores: Sequence[float]) -> float | None:
    """The ROC AUC of ``scores`` for ``labels`` (module doc); None unless both classes occur."""
    truth, values = np.asarray(labels, dtype=bool), np.asarray(scores, dtype=float)
    if truth.all() or not truth.any():
        return None
    positive, negative = values[truth][:, None], values[~truth][None, :]  # every pair, exactly
    return float(((positive > negative) + 0.5 * (positive == negative)).mean())
