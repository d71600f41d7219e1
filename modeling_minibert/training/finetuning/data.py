"""Fine-tuning data: read the formats people have, and check them before any training starts.

Sources (`load_data`):
    - CSV / TSV / JSON / JSON-lines files (read with `datasets`; columns are chosen by the task),
    - CoNLL-style files for token classification (a token and its tag per line, a blank line between sentences),
    - SQuAD-format JSON for question answering ({"data": [{"paragraphs": [{"context", "qas": [...]}]}]}),
    - a `datasets` dataset: a `Dataset` object, a folder written by `save_to_disk`, a folder of data files, or a
      dataset name that `datasets.load_dataset` can load (offline: one already in the local cache).

Bad data raises `DataError` (a ValueError) naming the file, the row and the field. Rows count from 1 in the order
of the records (in CSV files the header is not a row); CoNLL errors name the line of the file.
"""

from __future__ import annotations

import codecs
import json
import math
import os
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
from datasets import ClassLabel, Dataset, DatasetDict

# File suffix -> (datasets builder, its options).
TABLE_FORMATS: dict[str, tuple[str, dict[str, Any]]] = {
    ".csv": ("csv", {}),
    ".tsv": ("csv", {"delimiter": "\t"}),
    ".json": ("json", {}),
    ".jsonl": ("json", {}),
}
CONLL_SUFFIXES = (".conll", ".conllu", ".iob", ".bio", ".txt", ".tsv")
DOCSTART = "-DOCSTART-"  # CoNLL-2003 document separator; not a sentence


class DataError(ValueError):
    """Fine-tuning data that cannot be used as it is; the message names the file, the row and the field."""


@dataclass
class NamedDataset:
    """A dataset and how error messages refer to it (a file path, or "name[split]")."""

    dataset: Dataset
    name: str
    lines: list[int] | None = None  # for CoNLL files: the line each sentence starts on

    def where(self, index: int | None = None, field: str | None = None) -> str:
        """ "data/train.csv, row 3, field 'label'" — `index` counts from 0."""
        parts = [self.name]
        if index is not None:
            parts.append(f"sentence {index + 1} (line {self.lines[index]})" if self.lines else f"row {index + 1}")
        if field is not None:
            parts.append(f"field {field!r}")
        return ", ".join(parts)

    def __len__(self) -> int:
        return len(self.dataset)


DataSource = str | os.PathLike | Dataset | DatasetDict | NamedDataset


def load_data(source: DataSource, split: str = "train", conll: bool = False, name: str | None = None) -> NamedDataset:
    """Read one split of fine-tuning data.

    Args:
        source: a file, a folder (written by `Dataset.save_to_disk`, or holding data files), a `datasets` name, or a
            `Dataset` already in memory.
        split: the split to take when `source` holds several (a `DatasetDict`, a folder, a dataset name).
        conll: read files that are not CSV/JSON as CoNLL token/tag columns (token classification).
        name: how errors refer to in-memory data (default "the <split> data").

    Raises:
        FileNotFoundError: `source` is neither an existing file or folder nor a loadable dataset name.
        DataError: an empty file, a file that cannot be parsed, or a missing split.
    """
    if isinstance(source, NamedDataset):
        return source
    if isinstance(source, Dataset):
        return _non_empty(NamedDataset(source, name or f"the {split} data"))
    if isinstance(source, DatasetDict):
        return _non_empty(NamedDataset(_pick_split(source, split, name or "the dataset"), name or f"the {split} data"))
    path = Path(source)
    if path.is_file():
        return _non_empty(_read_file(path, conll))
    if path.is_dir():
        if (path / "dataset_dict.json").exists() or (path / "state.json").exists():
            loaded = datasets.load_from_disk(str(path))
        else:
            loaded = _load_dataset(str(path), split=None)
        if isinstance(loaded, DatasetDict):
            return _non_empty(NamedDataset(_pick_split(loaded, split, str(path)), f"{path}[{split}]"))
        return _non_empty(NamedDataset(loaded, str(path)))
    if (
        path.suffix.lower() in TABLE_FORMATS
        or path.suffix.lower() in CONLL_SUFFIXES
        or str(source).startswith((".", "/", "~"))
    ):
        raise FileNotFoundError(f"{source}: no such file or folder")
    # Anything else is a dataset name; offline this only works for datasets already in the local cache.
    try:
        loaded = _load_dataset(str(source), split=None)
    except (FileNotFoundError, ConnectionError, OSError, datasets.exceptions.DatasetNotFoundError) as err:
        raise FileNotFoundError(
            f"{source}: not a file or folder, and no dataset of that name could be loaded ({err})"
        ) from err
    return _non_empty(NamedDataset(_pick_split(loaded, split, str(source)), f"{source}[{split}]"))


def dataset_splits(source: DataSource) -> list[str] | None:
    """The split names of a multi-split source (a folder or dataset name), None for a single file or dataset."""
    if isinstance(source, DatasetDict):
        return list(source)
    if isinstance(source, (Dataset, NamedDataset)):
        return None
    path = Path(source)
    if path.is_file():
        return None
    if path.is_dir() and (path / "dataset_dict.json").exists():
        return list(json.loads((path / "dataset_dict.json").read_text())["splits"])
    if path.is_dir() and (path / "state.json").exists():
        return None
    try:
        loaded = _load_dataset(str(source), split=None)
    except Exception:  # noqa: BLE001 - an unreadable source is reported by load_data, with its own message
        return None
    return list(loaded) if isinstance(loaded, DatasetDict) else None


def _load_dataset(path: str, split: str | None, **kwargs) -> Dataset | DatasetDict:
    return datasets.load_dataset(path, split=split, **kwargs)


def _pick_split(loaded: DatasetDict, split: str, name: str) -> Dataset:
    if split not in loaded:
        raise DataError(f"{name}: no split {split!r}; the splits are {sorted(loaded)}")
    return loaded[split]


def _non_empty(data: NamedDataset) -> NamedDataset:
    if len(data.dataset) == 0:
        raise DataError(f"{data.name}: no rows")
    return data


def _read_file(path: Path, conll: bool) -> NamedDataset:
    if _is_blank(path):
        raise DataError(f"{path}: the file is empty")
    _check_utf8(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        squad = _try_read_squad(path)
        if squad is not None:
            return squad
    if conll and suffix not in (".csv", ".json", ".jsonl"):
        return read_conll(path)
    if suffix not in TABLE_FORMATS:
        raise DataError(
            f"{path}: unknown file type {suffix or '(no suffix)'!r}; use one of {sorted(TABLE_FORMATS)}"
            + (f" or, for token classification, CoNLL files {list(CONLL_SUFFIXES)}" if not conll else "")
        )
    builder, options = TABLE_FORMATS[suffix]
    try:
        dataset = datasets.load_dataset(builder, data_files=str(path), split="train", **options)
    except Exception as err:  # noqa: BLE001 - pandas/pyarrow raise many types; all mean "cannot parse this file"
        if "corresponds to no data" in str(err):  # datasets' way of saying the file parsed to zero rows
            raise DataError(f"{path}: no rows") from None
        raise DataError(f"{path}: cannot be read as {builder.upper()}: {err}") from err
    return NamedDataset(dataset, str(path))


def _check_utf8(path: Path) -> None:
    """Refuse a file that is not UTF-8 before `datasets` reads it: its CSV reader logs its own error line and
    raises a generic "error while generating the dataset" that names neither the file's encoding nor the byte."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    done = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as err:
                raise DataError(
                    f"{path}: not valid UTF-8 ({err.reason} at byte {done + err.start}); save it as UTF-8"
                ) from None
            if not chunk:
                return
            done += len(chunk)


def text_lines(path: str | os.PathLike, what: str = "text file") -> list[str]:
    """The non-blank lines of a UTF-8 text file, stripped; DataError naming the file if it is not text (not
    UTF-8, or holding control characters such as the NUL bytes of a binary file) or holds no text."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} {path} does not exist")
    _check_utf8(path)
    lines = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if (problem := _control_character("line", line.replace("\t", " "))) is not None:
            raise DataError(f"{what} {path}, line {number}: not text: {problem[:120]}")
        if line.strip():
            lines.append(line.strip())
    if not lines:
        raise DataError(f"{what} {path} holds no text")
    return lines


def _is_blank(path: Path) -> bool:
    with open(path, "rb") as f:
        while chunk := f.read(1 << 16):
            if chunk.strip():
                return False
    return True


def read_conll(path: str | os.PathLike, tag_column: int = -1) -> NamedDataset:
    """A CoNLL-style file -> dataset with `tokens` and `tags` (lists of strings), one row per sentence.

    Each line holds a token and its tag separated by whitespace (more columns are allowed, as in CoNLL-2003's
    "token POS chunk NER"; `tag_column` picks the tag, by default the last). Every line has the first line's
    number of columns, and no token or tag holds a control character. A blank line ends a sentence;
    "-DOCSTART-" lines are skipped. Hand-written because `datasets` has no CoNLL reader (the CoNLL-2003 loader
    is a Hub script tied to that one dataset).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not valid UTF-8 ({err.reason} at byte {err.start})") from None
    sentences: dict[str, list] = {"tokens": [], "tags": []}
    lines: list[int] = []
    tokens: list[str] = []
    tags: list[str] = []

    def end_sentence() -> None:
        if tokens:
            sentences["tokens"].append(list(tokens))
            sentences["tags"].append(list(tags))
            tokens.clear()
            tags.clear()

    width = first_line = None  # every token line has as many columns as the first one
    for number, line in enumerate(text.splitlines(), start=1):
        columns = line.split()
        if not columns or columns[0] == DOCSTART:
            end_sentence()
            continue
        if len(columns) < 2:
            raise DataError(f"{path}, line {number}: expected a token and a tag separated by whitespace, got {line!r}")
        if width is None:
            width, first_line = len(columns), number
        elif len(columns) != width:
            # A line that lost its tag (or gained a column) would otherwise train on another column as the tag.
            raise DataError(
                f"{path}, line {number}: expected {width} columns like line {first_line}, got {len(columns)}: {line!r}"
            )
        try:
            tag = columns[tag_column]
        except IndexError:
            raise DataError(f"{path}, line {number}: no column {tag_column} for the tag in {line!r}") from None
        for kind, value in (("token", columns[0]), ("tag", tag)):
            if (problem := _control_character(kind, value)) is not None:
                raise DataError(f"{path}, line {number}: {problem}")
        if not tokens:
            lines.append(number)
        tokens.append(columns[0])
        tags.append(tag)
    end_sentence()
    if not sentences["tokens"]:
        raise DataError(f"{path}: no sentences (expected lines of 'token tag', blank lines between sentences)")
    return NamedDataset(Dataset.from_dict(sentences), str(path), lines=lines)


def _try_read_squad(path: Path) -> NamedDataset | None:
    """SQuAD's nested JSON -> one row per question (id, title, context, question, answers), or None if the file
    is not in that format. Hand-written because `datasets`' JSON reader cannot flatten data/paragraphs/qas."""
    try:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None  # JSON lines, or not JSON at all: the table reader reports it
    if not isinstance(document, dict) or "data" not in document:
        return None
    rows: dict[str, list] = {"id": [], "title": [], "context": [], "question": [], "answers": []}

    def get(record: Any, key: str, kind: type, where: str) -> Any:
        if not isinstance(record, dict) or key not in record:
            raise DataError(f"{path}, {where}: missing field {key!r}")
        value = record[key]
        if not isinstance(value, kind):
            raise DataError(f"{path}, {where}, field {key!r}: expected {kind.__name__}, got {type(value).__name__}")
        return value

    for a, article in enumerate(get(document, "data", list, "top level")):
        for p, paragraph in enumerate(get(article, "paragraphs", list, f"data[{a}]")):
            where = f"data[{a}].paragraphs[{p}]"
            context = get(paragraph, "context", str, where)
            for q, qa in enumerate(get(paragraph, "qas", list, where)):
                qa_where = f"{where}.qas[{q}] (row {len(rows['id']) + 1})"
                answers = get(qa, "answers", list, qa_where)
                for answer in answers:
                    get(answer, "text", str, qa_where + ".answers")
                    get(answer, "answer_start", int, qa_where + ".answers")
                rows["id"].append(str(qa.get("id", len(rows["id"]))))
                rows["title"].append(str(article.get("title", "")))
                rows["context"].append(context)
                rows["question"].append(get(qa, "question", str, qa_where))
                rows["answers"].append(
                    {"text": [x["text"] for x in answers], "answer_start": [x["answer_start"] for x in answers]}
                )
    if not rows["id"]:
        raise DataError(f"{path}: no questions in the SQuAD data")
    return NamedDataset(Dataset.from_dict(rows), str(path))


# ---------------------------------------------------------------------------------------------------------------
# Checks: each returns the column as plain Python values, so that the tasks build their inputs from checked data.


def column_values(dataset: Dataset, column: str) -> list:
    """A column as a Python list (`dataset[column]` is a lazy `Column` in datasets 5)."""
    return dataset.select_columns([column])[:][column]


def require_columns(data: NamedDataset, *columns: str | None) -> None:
    """Raise DataError naming the first missing column and the columns there are."""
    for column in columns:
        if column is not None and column not in data.dataset.column_names:
            raise DataError(f"{data.name}: no column {column!r}; the columns are {data.dataset.column_names}")


def text_column(data: NamedDataset, column: str) -> list[str]:
    """The non-empty strings of `column`."""
    require_columns(data, column)
    values = column_values(data.dataset, column)
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise DataError(f"{data.where(i, column)}: expected text, got {_describe(value)}")
        if not value.strip():
            raise DataError(f"{data.where(i, column)}: empty text")
    return values


def label_column(data: NamedDataset, column: str) -> list[str]:
    """The labels of `column` as strings (class names of a `ClassLabel` column, else the values as written)."""
    require_columns(data, column)
    values = column_values(data.dataset, column)
    feature = data.dataset.features[column]
    if isinstance(feature, ClassLabel):
        return [feature.int2str(v) for v in values]
    for i, value in enumerate(values):
        if _is_missing(value):
            raise DataError(f"{data.where(i, column)}: missing label")
        if isinstance(value, (list, dict)):
            raise DataError(f"{data.where(i, column)}: expected one label, got {_describe(value)}")
        if isinstance(value, str) and (problem := _control_character("label", value)) is not None:
            raise DataError(f"{data.where(i, column)}: {problem}")
    return [_label_text(v) for v in values]


def tag_columns(data: NamedDataset, tokens_column: str, tags_column: str) -> tuple[list[list[str]], list[list[str]]]:
    """Tokens and tags per sentence: equal-length, non-empty lists of strings (tags of a `ClassLabel` list become names)."""
    require_columns(data, tokens_column, tags_column)
    all_tokens, all_tags = column_values(data.dataset, tokens_column), column_values(data.dataset, tags_column)
    tag_feature = getattr(data.dataset.features[tags_column], "feature", None)
    for i, (tokens, tags) in enumerate(zip(all_tokens, all_tags)):
        for column, value in ((tokens_column, tokens), (tags_column, tags)):
            if not isinstance(value, list):
                raise DataError(f"{data.where(i, column)}: expected a list, got {_describe(value)}")
        if not tokens:
            raise DataError(f"{data.where(i, tokens_column)}: empty sentence")
        if len(tokens) != len(tags):
            raise DataError(f"{data.where(i, tags_column)}: {len(tags)} tags for {len(tokens)} tokens")
        for token in tokens:
            if not isinstance(token, str) or not token.strip():
                raise DataError(f"{data.where(i, tokens_column)}: token {token!r} is not a non-empty string")
        for tag in tags:
            if _is_missing(tag):
                raise DataError(f"{data.where(i, tags_column)}: missing tag")
            if isinstance(tag, str) and (problem := _control_character("tag", tag)) is not None:
                raise DataError(f"{data.where(i, tags_column)}: {problem}")
    if isinstance(tag_feature, ClassLabel):
        all_tags = [[tag_feature.int2str(t) for t in tags] for tags in all_tags]
    else:
        all_tags = [[_label_text(t) for t in tags] for tags in all_tags]
    return all_tokens, all_tags


def check_split_labels(
    data: NamedDataset, column: str, labels: Sequence[str] | Sequence[Sequence[str]], label_set: Sequence[str]
) -> None:
    """Raise DataError at the first label (or tag, for lists of tags) outside `label_set`."""
    allowed = set(label_set)
    for i, value in enumerate(labels):
        for label in value if isinstance(value, list) else [value]:
            if label not in allowed:
                raise DataError(f"{data.where(i, column)}: label {label!r} is not one of the labels {list(label_set)}")


def sorted_labels(values: Sequence[str] | Sequence[Sequence[str]]) -> list[str]:
    """The distinct labels in a stable order: numerically when they are all numbers, else alphabetically
    (with "O" first for tag sets, where it is the usual id 0)."""
    flat = {label for value in values for label in (value if isinstance(value, list) else [value])}
    try:
        numbers = {label: float(label) for label in flat}
    except ValueError:
        return sorted(flat, key=lambda label: (label != "O", label))
    # NaN compares false with everything, so sorting on it alone would keep the set's order, which changes with
    # PYTHONHASHSEED: NaNs go last, and the text breaks ties ("1" and "1.0"), so the ids are the same every run.
    return sorted(
        flat,
        key=lambda label: (math.isnan(numbers[label]), 0.0 if math.isnan(numbers[label]) else numbers[label], label),
    )


@dataclass
class QuestionAnswerExamples:
    """Checked extractive-QA examples; `answers[i]` holds every reference answer, the first one is trained on."""

    ids: list[str]
    questions: list[str]
    contexts: list[str]
    answers: list[dict[str, list]]  # {"text": [...], "answer_start": [...]}


def question_answer_columns(
    data: NamedDataset,
    question_column: str = "question",
    context_column: str = "context",
    answers_column: str = "answers",
) -> QuestionAnswerExamples:
    """Questions, contexts and answers, with every answer found in its context at its `answer_start`.

    Answers may be SQuAD's {"text": [...], "answer_start": [...]} or a list of {"text", "answer_start"} dicts.
    """
    questions = text_column(data, question_column)
    contexts = text_column(data, context_column)
    require_columns(data, answers_column)
    has_ids = "id" in data.dataset.column_names
    ids = [str(v) for v in column_values(data.dataset, "id")] if has_ids else [str(i) for i in range(len(questions))]
    answers = []
    for i, (context, raw) in enumerate(zip(contexts, column_values(data.dataset, answers_column))):
        where = (
            data.where(i, answers_column)
            if not has_ids
            else f"{data.where(i)} (id {ids[i]!r}), field {answers_column!r}"
        )
        answer = _normalise_answers(raw, where)
        if not answer["text"]:
            raise DataError(f"{where}: no answer (unanswerable questions are not supported)")
        for text, start in zip(answer["text"], answer["answer_start"]):
            if not text.strip():
                raise DataError(f"{where}: empty answer text")
            if context[start : start + len(text)] != text:
                found = context.find(text)
                hint = f" (it occurs at {found})" if found >= 0 else " (the context does not contain it)"
                if found < 0 and unicodedata.normalize("NFC", text) in unicodedata.normalize("NFC", context):
                    # Same characters, composed differently (é as one code point or as e + accent): offsets
                    # differ, so the span cannot be found; the user must normalise both the same way.
                    hint = (
                        f" (it does in another Unicode normalization: answer is {_normal_form(text)}, context "
                        f"{_normal_form(context)}; normalize both, e.g. unicodedata.normalize('NFC', ...))"
                    )
                raise DataError(
                    f"{where}: answer {text!r} is not in the context at answer_start={start}; the context there "
                    f"reads {context[start : start + len(text)]!r}{hint}"
                )
        answers.append(answer)
    return QuestionAnswerExamples(ids, questions, contexts, answers)


def _normal_form(text: str) -> str:
    forms = [form for form in ("NFC", "NFD") if unicodedata.is_normalized(form, text)]
    return "/".join(forms) if forms else "mixed"


def _normalise_answers(raw: Any, where: str) -> dict[str, list]:
    if isinstance(raw, dict) and {"text", "answer_start"} <= set(raw):
        texts, starts = raw["text"], raw["answer_start"]
        if not isinstance(texts, list):
            texts, starts = [texts], [starts]
    elif isinstance(raw, list) and all(isinstance(a, dict) and {"text", "answer_start"} <= set(a) for a in raw):
        texts, starts = [a["text"] for a in raw], [a["answer_start"] for a in raw]
    else:
        raise DataError(
            f"{where}: expected {{'text': [...], 'answer_start': [...]}} or a list of {{'text', 'answer_start'}}, "
            f"got {_describe(raw)}"
        )
    if not isinstance(starts, list) or len(texts) != len(starts):
        raise DataError(f"{where}: 'text' and 'answer_start' must be lists of the same length")
    for text, start in zip(texts, starts):
        if not isinstance(text, str):
            raise DataError(f"{where}: answer text must be a string, got {_describe(text)}")
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise DataError(f"{where}: answer_start must be a non-negative integer, got {start!r}")
    return {"text": list(texts), "answer_start": list(starts)}


def _control_character(kind: str, value: str) -> str | None:
    """Why `value` cannot be a token or tag (it holds a control character: NUL, escape sequences, ...), or None.
    Such characters come from corrupt or binary files; as labels they would reach config.json and the pipelines."""
    for ch in value:
        if unicodedata.category(ch) == "Cc":
            return f"the {kind} {value!r} contains the control character U+{ord(ch):04X}"
    return None


def _is_missing(value: Any) -> bool:
    return (
        value is None
        or (isinstance(value, float) and math.isnan(value))
        or (isinstance(value, str) and not value.strip())
    )


def _label_text(value: Any) -> str:
    # CSV readers turn a column of 0/1 into ints, and one with a blank cell into floats: 1.0 is label "1".
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"


__all__ = [
    "DataError",
    "DataSource",
    "NamedDataset",
    "QuestionAnswerExamples",
    "check_split_labels",
    "column_values",
    "dataset_splits",
    "label_column",
    "load_data",
    "question_answer_columns",
    "read_conll",
    "require_columns",
    "sorted_labels",
    "tag_columns",
    "text_column",
    "text_lines",
]
