"""The Rotten Tomatoes sentiment benchmark's data and TF-IDF baseline, for the benchmarks and notebook 06.

Defined in tests/fixtures/rotten_tomatoes.py, because the fine-tuning tests read the same split and tests never
import from benchmarks/; this module only puts that folder on the path.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The benchmarks run as scripts (and notebook 06 from the repository root): tests/fixtures is not a package path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fixtures.rotten_tomatoes import LABELS, data_file, load_rotten_tomatoes, movie_reviews, plot_sentences, tfidf_baseline  # noqa: E402

__all__ = ["LABELS", "data_file", "load_rotten_tomatoes", "movie_reviews", "plot_sentences", "tfidf_baseline"]
