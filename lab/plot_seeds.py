r"""Recipes compared over seeds: each Rotten Tomatoes result file's validation and test accuracy, one point per seed,
one row of points per recipe, the means marked and the goal drawn.

Reads what `benchmarks.distill_rotten_tomatoes` (the "Mini-BERT distilled" row) and
`benchmarks.finetune_rotten_tomatoes` (the fine-tuned model) write, so task-distilled and fine-tuned-alone
students can sit in one figure:

    python -m lab.plot_seeds --output lab/results/general_distillation_steps_seeds.png --goal 0.800 \
        --recipe "750 steps" lab/results/distill_reviews_student_dropout_0_seed4{2,3,4}.json \
        --recipe "1,500 steps" lab/results/distill_reviews_general_1500_steps_seed4{2,3,4}.json
"""

from __future__ import annotations

import json
import os
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean

from matplotlib.figure import Figure

from benchmarks.arguments import parser

SPLITS = ("validation", "test")


def accuracies(path: Path) -> dict[str, float]:
    """{split: accuracy} of the student a result file is about."""
    results = json.loads(path.read_text())
    row = results["systems"]["Mini-BERT distilled"] if "systems" in results else results["minibert"]
    return {split: row[split]["accuracy"] for split in SPLITS}


def plot(recipes: list[tuple[str, list[dict[str, float]]]], output: Path, goal: float | None, title: str) -> None:
    """recipes: (name, [{split: accuracy} per seed])."""
    figure = Figure(figsize=(4.0 + 1.6 * len(recipes), 4.2))
    axes = figure.subplots(1, len(SPLITS), sharey=True)
    for ax, split in zip(axes, SPLITS):
        for x, (name, seeds) in enumerate(recipes):
            values = [seed[split] for seed in seeds]
            ax.scatter([x] * len(values), values, color=f"C{x}", alpha=0.7, zorder=3)
            ax.hlines(mean(values), x - 0.25, x + 0.25, color=f"C{x}", linewidth=2)
            ax.annotate(f"{mean(values):.3f}", (x + 0.27, mean(values)), va="center", fontsize=8)
        if goal is not None:
            ax.axhline(goal, color="grey", linestyle="--", linewidth=1, label=f"goal {goal:.3f}")
            ax.legend(loc="best", fontsize=8)  # clear of the points
        ax.set_xticks(range(len(recipes)), [textwrap.fill(name, 12) for name, _ in recipes], fontsize=8)
        ax.set_xlim(-0.5, len(recipes) - 0.3)
        ax.set_title(f"{split} accuracy (a point per seed, bar: mean)", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    figure.suptitle(title, fontsize=10)
    tmp = output.with_name(f".{output.stem}.tmp{output.suffix}")
    figure.savefig(tmp, dpi=120, bbox_inches="tight")
    os.replace(tmp, output)


@dataclass
class PlotSeedsArguments:
    output: str = field(metadata={"help": "the PNG to write"})
    recipe: list[str] = field(
        metadata={
            "help": "a recipe's name, then its result files (one per seed); once per recipe",
            "action": "append",
            "metavar": ("NAME", "RESULT"),
        }
    )
    goal: float | None = field(default=None, metadata={"help": "a horizontal line at this accuracy"})
    title: str = field(default="Rotten Tomatoes, split by movie")


def main(argv: list[str] | None = None) -> None:
    built = parser(PlotSeedsArguments, module=__spec__.name, doc=__doc__)
    (args,) = built.parse_args_into_dataclasses(argv)
    recipes = []
    for name, *files in args.recipe:
        if not files:
            built.error(f"--recipe {name!r} names no result file")
        seeds = []
        for f in files:
            try:
                seeds.append(accuracies(Path(f)))
            except OSError as err:
                built.error(f"--recipe {name!r}: cannot read {f}: {err.strerror}")
            except (ValueError, KeyError, TypeError):
                built.error(
                    f"--recipe {name!r}: {f} is not a result of benchmarks.distill_rotten_tomatoes or "
                    "benchmarks.finetune_rotten_tomatoes (no student's validation and test accuracy)"
                )
        recipes.append((name, seeds))
    plot(recipes, Path(args.output), args.goal, args.title)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
