"""The figures a fine-tuning run leaves in its output folder, drawn on bare matplotlib `Figure`s (no pyplot state)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from sklearn.metrics import ConfusionMatrixDisplay


def plot_training_curves(log_history: list[dict[str, Any]], metric: str, best_step: int | None, path: Path) -> None:
    """Training loss (and validation loss and `metric`, when evaluated) against the step; the saved step marked."""
    train = [(e["step"], e["loss"]) for e in log_history if "loss" in e]
    evals = [(e["step"], e.get("eval_loss"), e.get(f"eval_{metric}")) for e in log_history if "eval_loss" in e]
    figure = Figure(figsize=(9, 3.5))
    loss_ax, metric_ax = figure.subplots(1, 2)
    if train:
        loss_ax.plot(*zip(*train), label="training loss")
    if evals:
        loss_ax.plot([s for s, _, _ in evals], [v for _, v, _ in evals], "o-", label="validation loss")
        metric_ax.plot([s for s, _, _ in evals], [m for _, _, m in evals], "o-", color="tab:green")
        if best_step is not None:
            metric_ax.axvline(best_step, color="grey", linestyle="--", linewidth=1, label="saved (best)")
            metric_ax.legend()
    loss_ax.set(xlabel="step", ylabel="loss", title="Loss")
    if train or evals:
        loss_ax.legend()
    metric_ax.set(xlabel="step", ylabel=metric, title=f"Validation {metric}" if evals else "(no validation data)")
    figure.savefig(path, dpi=120, bbox_inches="tight")


def plot_learning_rate_search(search: dict[str, Any], path: Path) -> None:
    """Each learning rate's validation score (the search's metric) against the step, the chosen one drawn bold."""
    figure = Figure(figsize=(6, 3.5))
    ax = figure.subplots()
    metric = search["metric"]
    for run in search["runs"]:
        if metric not in run:  # diverged: no score, no curve
            ax.plot([], [], "x", label=f"{run['learning_rate']:g}: diverged")
            continue
        chosen = run["learning_rate"] == search["chosen_learning_rate"]
        steps, scores = zip(*run["curve"]) if run["curve"] else ((), ())
        ax.plot(
            steps,
            scores,
            "o-",
            linewidth=2.5 if chosen else 1,
            label=f"{run['learning_rate']:g}: {run[metric]:.4f}" + (" (chosen)" if chosen else ""),
        )
    ax.set(xlabel="step", ylabel=metric, title="Validation score per learning rate")
    ax.legend(title="learning rate: final", fontsize=8)
    figure.savefig(path, dpi=120, bbox_inches="tight")


def plot_confusion_matrix(predictions: np.ndarray, references: np.ndarray, label_names: list[str], path: Path) -> None:
    """Validation confusion matrix: rows are the true labels, columns the predicted ones."""
    figure = Figure(figsize=(1.2 * len(label_names) + 3, 1.2 * len(label_names) + 2))
    ax = figure.subplots()
    ConfusionMatrixDisplay.from_predictions(
        references,
        predictions,
        labels=list(range(len(label_names))),
        display_labels=label_names,
        ax=ax,
        colorbar=False,
    )
    ax.set_title("Validation confusion matrix")
    figure.savefig(path, dpi=120, bbox_inches="tight")
