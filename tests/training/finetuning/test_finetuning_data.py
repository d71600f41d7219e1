"""Reading fine-tuning data in the formats people have, and the errors bad data gets (file, row and field named)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import datasets
import huggingface_hub
import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, List, Value

from modeling_minibert.training.finetuning.data import (
    DataError,
    check_split_labels,
    dataset_splits,
    label_column,
    load_data,
    question_answer_columns,
    read_conll,
    sorted_labels,
    tag_columns,
    text_column,
)

FIXTURES = Path(__file__).resolve().parents[3] / "examples"


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_csv_tsv_json_jsonl_read_the_same_rows(tmp_path):
    rows = [{"sentence": "a fine film", "label": "pos"}, {"sentence": "dull, long", "label": "neg"}]
    csv = write(tmp_path / "d.csv", 'sentence,label\na fine film,pos\n"dull, long",neg\n')
    tsv = write(tmp_path / "d.tsv", "sentence\tlabel\na fine film\tpos\ndull, long\tneg\n")
    jsn = write(tmp_path / "d.json", json.dumps(rows))
    jsonl = write(tmp_path / "d.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    for path in (csv, tsv, jsn, jsonl):
        data = load_data(path)
        assert data.name == str(path)
        assert text_column(data, "sentence") == ["a fine film", "dull, long"]
        assert label_column(data, "label") == ["pos", "neg"]


def test_missing_column_names_file_and_columns(tmp_path):
    data = load_data(write(tmp_path / "train.csv", "text,label\nhello,1\n"))
    with pytest.raises(DataError, match=r"train\.csv: no column 'sentiment'; the columns are \['text', 'label'\]"):
        label_column(data, "sentiment")


def test_empty_and_header_only_files(tmp_path):
    with pytest.raises(DataError, match=r"empty\.csv: the file is empty"):
        load_data(write(tmp_path / "empty.csv", "  \n\n"))
    with pytest.raises(DataError, match=r"header\.csv: no rows"):
        load_data(write(tmp_path / "header.csv", "text,label\n"))
    with pytest.raises(DataError, match=r"empty\.conll: the file is empty"):
        load_data(write(tmp_path / "empty.conll", "\n"), conll=True)


def test_empty_text_and_missing_label_name_the_row(tmp_path):
    data = load_data(write(tmp_path / "t.jsonl", '{"text": "ok", "label": "a"}\n{"text": "  ", "label": "b"}\n'))
    with pytest.raises(DataError, match=r"t\.jsonl, row 2, field 'text': empty text"):
        text_column(data, "text")
    data = load_data(write(tmp_path / "l.csv", "text,label\nfine,a\nok,\n"))
    with pytest.raises(DataError, match=r"l\.csv, row 2, field 'label': missing label"):
        label_column(data, "label")
    data = load_data(write(tmp_path / "n.jsonl", '{"text": 3, "label": "a"}\n'))
    with pytest.raises(DataError, match=r"n\.jsonl, row 1, field 'text': expected text, got int 3"):
        text_column(data, "text")


def test_label_outside_the_label_set(tmp_path):
    data = load_data(write(tmp_path / "validation.csv", "text,label\nfine,pos\nbad,neg\nmeh,neutral\n"))
    labels = label_column(data, "label")
    with pytest.raises(
        DataError,
        match=r"validation\.csv, row 3, field 'label': label 'neutral' is not one of the labels \['neg', 'pos'\]",
    ):
        check_split_labels(data, "label", labels, ["neg", "pos"])


def test_numeric_labels_are_text_in_numeric_order(tmp_path):
    data = load_data(write(tmp_path / "n.csv", "text,label\na,10\nb,2\nc,1\n"))
    labels = label_column(data, "label")
    assert labels == ["10", "2", "1"]
    assert sorted_labels(labels) == ["1", "2", "10"]
    assert sorted_labels([["B-PER", "O"], ["I-PER"]]) == ["O", "B-PER", "I-PER"]


def test_class_label_features_become_names():
    features = Features({"text": Value("string"), "label": ClassLabel(names=["neg", "pos"])})
    data = load_data(Dataset.from_dict({"text": ["x", "y"], "label": [1, 0]}, features=features), name="mine")
    assert label_column(data, "label") == ["pos", "neg"]
    tag_features = Features({"tokens": List(Value("string")), "tags": List(ClassLabel(names=["O", "B-X"]))})
    tagged = load_data(Dataset.from_dict({"tokens": [["a", "b"]], "tags": [[1, 0]]}, features=tag_features))
    assert tag_columns(tagged, "tokens", "tags") == ([["a", "b"]], [["B-X", "O"]])


def test_conll_reader():
    data = read_conll(FIXTURES / "ner_train.conll")
    tokens, tags = tag_columns(data, "tokens", "tags")
    assert len(tokens) == 300
    assert all(len(t) == len(g) for t, g in zip(tokens, tags))
    assert data.lines[0] == 3  # "-DOCSTART- O", blank line, then the first sentence
    assert "-DOCSTART-" not in {t for sentence in tokens for t in sentence}


def test_conll_extra_columns_and_errors(tmp_path):
    path = write(tmp_path / "c.conll", "EU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nPeter NNP B-NP B-PER\n")
    data = load_data(path, conll=True)
    assert tag_columns(data, "tokens", "tags") == ([["EU", "rejects"], ["Peter"]], [["B-ORG", "O"], ["B-PER"]])
    assert read_conll(path, tag_column=1).dataset[0]["tags"] == ["NNP", "VBZ"]
    # A tag outside the label set names the sentence and the line it starts on.
    tokens, tags = tag_columns(data, "tokens", "tags")
    with pytest.raises(DataError, match=r"c\.conll, sentence 2 \(line 4\), field 'tags': label 'B-PER' is not one of"):
        check_split_labels(data, "tags", tags, ["O", "B-ORG"])
    bad = write(tmp_path / "bad.conll", "Peter B-PER\nlives\n")
    with pytest.raises(
        DataError, match=r"bad\.conll, line 2: expected a token and a tag separated by whitespace, got 'lives'"
    ):
        read_conll(bad)
    latin = tmp_path / "latin.conll"
    latin.write_bytes("Jos\xe9 B-PER\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin\.conll: not valid UTF-8"):
        read_conll(latin)


def test_tag_lists_must_pair_with_tokens(tmp_path):
    rows = [{"tokens": ["a", "b"], "tags": ["O", "O"]}, {"tokens": ["c"], "tags": ["O", "O"]}]
    data = load_data(write(tmp_path / "t.json", json.dumps(rows)), conll=True)
    with pytest.raises(DataError, match=r"t\.json, row 2, field 'tags': 2 tags for 1 tokens"):
        tag_columns(data, "tokens", "tags")


def test_squad_json_is_flattened_one_row_per_question():
    data = load_data(FIXTURES / "qa_train.json")
    assert data.dataset.column_names == ["id", "title", "context", "question", "answers"]
    examples = question_answer_columns(data)
    assert len(examples.ids) == 300
    for context, answer in zip(examples.contexts, examples.answers):
        start, text = answer["answer_start"][0], answer["text"][0]
        assert context[start : start + len(text)] == text


def squad(context: str, answer: str, start: int, question: str = "Where?") -> dict:
    qa = {"id": "q1", "question": question, "answers": [{"text": answer, "answer_start": start}]}
    return {"data": [{"title": "t", "paragraphs": [{"context": context, "qas": [qa]}]}]}


def test_answer_not_at_answer_start(tmp_path):
    path = write(tmp_path / "qa.json", json.dumps(squad("Ana lives in Lisbon.", "Lisbon", 3)))
    with pytest.raises(
        DataError,
        match=r"qa\.json, row 1 \(id 'q1'\), field 'answers': answer 'Lisbon' is not in the context at answer_start=3;"
        r" the context there reads ' lives' \(it occurs at 13\)",
    ):
        question_answer_columns(load_data(path))
    path = write(tmp_path / "qa2.json", json.dumps(squad("Ana lives in Lisbon.", "Oslo", 0)))
    with pytest.raises(DataError, match=r"answer 'Oslo' is not in the context .*\(the context does not contain it\)"):
        question_answer_columns(load_data(path))


def test_malformed_squad_names_the_record(tmp_path):
    document = squad("Ana lives in Lisbon.", "Lisbon", 13)
    del document["data"][0]["paragraphs"][0]["qas"][0]["question"]
    path = write(tmp_path / "qa.json", json.dumps(document))
    with pytest.raises(
        DataError, match=r"qa\.json, data\[0\]\.paragraphs\[0\]\.qas\[0\] \(row 1\): missing field 'question'"
    ):
        load_data(path)
    document = squad("Ana lives in Lisbon.", "Lisbon", 13)
    document["data"][0]["paragraphs"][0]["qas"] = []
    with pytest.raises(DataError, match=r"no questions in the SQuAD data"):
        load_data(write(tmp_path / "none.json", json.dumps(document)))


def test_flat_qa_rows_with_answer_lists(tmp_path):
    rows = [
        {"question": "Where?", "context": "Ana lives in Lisbon.", "answers": [{"text": "Lisbon", "answer_start": 13}]},
        {"question": "Who?", "context": "Ana lives in Lisbon.", "answers": {"text": [], "answer_start": []}},
    ]
    data = load_data(write(tmp_path / "qa.jsonl", "\n".join(json.dumps(r) for r in rows)))
    with pytest.raises(
        DataError, match=r"qa\.jsonl, row 2, field 'answers': no answer \(unanswerable questions are not supported\)"
    ):
        question_answer_columns(data)
    examples = question_answer_columns(load_data(Dataset.from_list(rows[:1])))
    assert examples.answers == [{"text": ["Lisbon"], "answer_start": [13]}]
    assert examples.ids == ["0"]


def test_datasets_folders_and_splits(tmp_path):
    splits = DatasetDict(
        train=Dataset.from_dict({"text": ["a", "b"], "label": ["x", "y"]}),
        validation=Dataset.from_dict({"text": ["c"], "label": ["x"]}),
    )
    splits.save_to_disk(tmp_path / "saved")
    assert dataset_splits(tmp_path / "saved") == ["train", "validation"]
    data = load_data(tmp_path / "saved", split="validation")
    assert data.name == f"{tmp_path / 'saved'}[validation]" and len(data) == 1
    with pytest.raises(DataError, match=r"saved: no split 'test'; the splits are \['train', 'validation'\]"):
        load_data(tmp_path / "saved", split="test")
    # A folder of data files, read by datasets.load_dataset (split names from the file names).
    folder = tmp_path / "files"
    folder.mkdir()
    write(folder / "train.csv", "text,label\na,x\nb,y\n")
    write(folder / "validation.csv", "text,label\nc,x\n")
    assert sorted(dataset_splits(folder)) == ["train", "validation"]
    assert text_column(load_data(folder, split="train"), "text") == ["a", "b"]


def test_missing_sources(tmp_path, monkeypatch):
    # Offline mode, as on this machine without a network: datasets then looks in its cache only, without retries.
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(FileNotFoundError, match=r"nope\.csv: no such file or folder"):
        load_data(tmp_path / "nope.csv")
    with pytest.raises(
        FileNotFoundError, match=r"not-a-dataset-anywhere: not a file or folder, and no dataset of that name"
    ):
        load_data("not-a-dataset-anywhere")
    with pytest.raises(DataError, match=r"d\.xlsx: unknown file type '\.xlsx'"):
        load_data(write(tmp_path / "d.xlsx", "x"))


@pytest.mark.parametrize(
    "text, message",
    [
        # One line of a 3-column file lost its tag: its POS column must not become the tag.
        (
            "EU NNP B-ORG\nrejects VBZ\nplans NNS O\n",
            r"bad\.conll, line 2: expected 3 columns like line 1, got 2: 'rejects VBZ'",
        ),
        # A stray fourth column must not become the tag either.
        (
            "EU NNP B-ORG\nrejects VBZ O extra\n",
            r"bad\.conll, line 2: expected 3 columns like line 1, got 4: 'rejects VBZ O extra'",
        ),
        (
            "EU B-ORG\n\nPeter NNP B-PER\n",
            r"bad\.conll, line 3: expected 2 columns like line 1, got 3: 'Peter NNP B-PER'",
        ),
    ],
    ids=["missing-last-column", "extra-column", "sentences-disagree"],
)
def test_conll_lines_must_have_the_files_column_count(tmp_path, text, message):
    with pytest.raises(DataError, match=message) as raised:
        read_conll(write(tmp_path / "bad.conll", text))
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("character", ["\x00", "\x07", "\x7f", "\x9b"], ids=["NUL", "BEL", "DEL", "C1-CSI"])
@pytest.mark.parametrize("where", ["tag", "token"])
def test_conll_control_characters_are_refused(tmp_path, character, where):
    token, tag = ("Pe" + character + "ter", "B-PER") if where == "token" else ("Peter", "B-PER" + character)
    path = write(tmp_path / "ctl.conll", f"EU B-ORG\n{token} {tag}\n")
    escaped = repr(token if where == "token" else tag)
    with pytest.raises(
        DataError,
        match=rf"ctl\.conll, line 2: the {where} {re.escape(escaped)} contains the control character U\+{ord(character):04X}",
    ) as raised:
        read_conll(path)
    assert "\n" not in str(raised.value) and character not in str(raised.value)


def test_control_characters_in_tag_lists_are_refused(tmp_path):
    rows = [{"tokens": ["a", "b"], "tags": ["O", "B-X\x00"]}]
    data = load_data(write(tmp_path / "t.json", json.dumps(rows)), conll=True)
    with pytest.raises(
        DataError, match=r"t\.json, row 1, field 'tags': the tag 'B-X\\x00' contains the control character U\+0000"
    ):
        tag_columns(data, "tokens", "tags")


def test_label_ids_do_not_depend_on_the_hash_seed():
    """Labels that read as numbers, NaN among them, get the same ids under any PYTHONHASHSEED (a resumed run in
    another process must use the ids of the first)."""
    import inspect
    import subprocess
    import sys

    from fixtures.environment import clean_env

    from modeling_minibert.training.finetuning.data import sorted_labels

    # A process per seed (the hash secret is fixed when an interpreter starts): three are enough, since the old order
    # (a set sorted on float alone) came out different under each of seeds 0, 1, 2. Each runs the function's own
    # source, which needs only `math`, rather than the training stack's seconds of imports.
    code = f"from __future__ import annotations\nimport math\n{inspect.getsource(sorted_labels)}\nprint(sorted_labels(%r))"
    values = ["1", "nan", "2", "NaN", "0.5", "1.0", "-inf", "10"]
    orders = {
        subprocess.run(
            [sys.executable, "-c", code % values],
            env=clean_env(PYTHONHASHSEED=str(seed)),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in range(3)
    }
    assert orders == {"['-inf', '0.5', '1', '1.0', '2', '10', 'NaN', 'nan']\n"}
