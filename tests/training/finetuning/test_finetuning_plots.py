"""The fine-tuning figures: drawn from Trainer's log history and from predictions, written as PNG files."""

from __future__ import annotations

import numpy as np
from matplotlib.image import imread

from modeling_minibert.training.finetuning.plots import plot_confusion_matrix, plot_training_curves

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_training_curves_are_two_panels_in_a_png(tmp_path):
    history = [
        {"step": 10, "loss": 0.9},
        {"step": 20, "loss": 0.7},
        {"step": 20, "eval_loss": 0.8, "eval_f1": 0.5},
        {"step": 30, "loss": 0.5},
        {"step": 40, "eval_loss": 0.6, "eval_f1": 0.7},
    ]
    plot_training_curves(history, "f1", best_step=40, path=tmp_path / "curves.png")
    plot_training_curves([{"step": 5, "loss": 1.0}], "accuracy", best_step=None, path=tmp_path / "no-eval.png")
    for name in ("curves.png", "no-eval.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG_SIGNATURE
    # Two panels side by side: wider than tall.
    height, width, _ = imread(tmp_path / "curves.png").shape
    assert width > 1.5 * height


def test_confusion_matrix_is_written_as_a_png(tmp_path):
    labels = ["fresh", "rotten", "neutral"]
    plot_confusion_matrix(np.array([0, 1, 1, 2]), np.array([0, 1, 2, 2]), labels, tmp_path / "confusion.png")
    image = imread(tmp_path / "confusion.png")
    assert (tmp_path / "confusion.png").read_bytes()[:8] == PNG_SIGNATURE
    assert image.shape[0] > 200 and image.shape[1] > 200
