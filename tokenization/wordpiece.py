"""The WordPiece tokenizer itself: its pipeline, how it is saved, and how a saved one is checked and loaded.

The pipeline is BERT's, built from `tokenizers` parts:

    text -> BertNormalizer (clean control chars, split CJK, lowercase / strip accents)
         -> BertPreTokenizer (split on whitespace and punctuation)
         -> WordPiece (greedy longest match, "##" continuation prefix, [UNK] for unknown words)
         -> TemplateProcessing ([CLS] A [SEP] / [CLS] A [SEP] B [SEP], token_type_ids 0/1)

It is wrapped in transformers' fast BERT tokenizer so that `AutoTokenizer`, `Trainer`, data collators and
pipelines accept it, and a saved folder loads in any process with plain transformers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import transformers
from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece

# Fixed ids: the model's config assumes pad_token_id == 0, and fixing the others keeps every vocabulary
# we train interchangeable at the positions a checkpoint cares about.
SPECIAL_TOKENS: dict[str, str] = {
    "pad_token": "[PAD]",
    "unk_token": "[UNK]",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "mask_token": "[MASK]",
}
SPECIAL_TOKEN_IDS: dict[str, int] = {token: i for i, token in enumerate(SPECIAL_TOKENS.values())}
CONTINUING_SUBWORD_PREFIX = "##"
# Same limit as BERT's original WordpieceTokenizer: longer "words" become a single [UNK].
MAX_INPUT_CHARS_PER_WORD = 100

VOCAB_FILE = "vocab.txt"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"


def build_backend(
    vocab: dict[str, int] | None, lowercase: bool = True, strip_accents: bool | None = None
) -> Tokenizer:
    """The `tokenizers` pipeline of BERT; with `vocab=None` an untrained one, ready for a `WordPieceTrainer`.

    `strip_accents=None` follows `lowercase`, as in the original BERT.
    """
    model = WordPiece(
        vocab if vocab is not None else {},
        unk_token=SPECIAL_TOKENS["unk_token"],
        continuing_subword_prefix=CONTINUING_SUBWORD_PREFIX,
        max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD,
    )
    backend = Tokenizer(model)
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=strip_accents, lowercase=lowercase
    )
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix=CONTINUING_SUBWORD_PREFIX)
    cls, sep = SPECIAL_TOKENS["cls_token"], SPECIAL_TOKENS["sep_token"]
    if vocab is not None:
        backend.post_processor = processors.TemplateProcessing(
            single=f"{cls}:0 $A:0 {sep}:0",
            pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
            special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])],
        )
    return backend


class BertTokenizerFast(transformers.BertTokenizer):
    """transformers' fast BERT tokenizer whose `save_pretrained` also writes `vocab.txt` and `special_tokens_map.json`.

    transformers 5 saves only tokenizer.json + tokenizer_config.json; vocab.txt is what the slow/legacy
    `BertTokenizerLegacy`, older transformers and non-HF tools read. The class is named `...Fast` on purpose:
    `save_pretrained` records the class name without its "Fast" suffix, so saved folders name
    `BertTokenizer` and load with plain transformers, without this package.
    """

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str]:
        # The WordPiece vocabulary only: tokens added later (`add_tokens`) live in tokenizer.json, as in BERT.
        vocab = self.backend_tokenizer.get_vocab(with_added_tokens=False)
        tokens = sorted(vocab, key=vocab.__getitem__)
        # vocab.txt stores ids implicitly as line numbers: refuse to write a file that would renumber them.
        if [vocab[t] for t in tokens] != list(range(len(tokens))):
            raise ValueError(
                f"vocabulary ids are not contiguous from 0 to {len(tokens) - 1}: cannot write {VOCAB_FILE}"
            )
        bad = [t for t in tokens if "\n" in t or "\r" in t]
        if bad:
            raise ValueError(f"token {bad[0]!r} contains a line break: cannot write {VOCAB_FILE}")
        path = os.path.join(save_directory, (filename_prefix + "-" if filename_prefix else "") + VOCAB_FILE)
        _files().write_text(path, "".join(token + "\n" for token in tokens))
        return (path,)

    def _save_pretrained(
        self,
        save_directory: str | os.PathLike,
        file_names: tuple[str, ...],
        legacy_format: bool | None = None,
        filename_prefix: str | None = None,
    ) -> tuple[str, ...]:
        file_names = super()._save_pretrained(save_directory, file_names, legacy_format, filename_prefix)
        vocab_files = self.save_vocabulary(str(save_directory), filename_prefix)
        # transformers 5 keeps the special tokens in tokenizer_config.json; the separate map is for older readers.
        map_path = os.path.join(
            save_directory, (filename_prefix + "-" if filename_prefix else "") + SPECIAL_TOKENS_MAP_FILE
        )
        _files().write_text(map_path, json.dumps(self.special_tokens_map, indent=2, sort_keys=True) + "\n")
        return file_names + vocab_files + (map_path,)


def make_tokenizer(
    vocab: dict[str, int],
    lowercase: bool = True,
    strip_accents: bool | None = None,
    model_max_length: int | None = None,
) -> BertTokenizerFast:
    """Wrap a WordPiece vocabulary (token -> id) into the fast tokenizer. The vocabulary must hold the special tokens."""
    check_vocab(vocab, "the vocabulary")
    kwargs = {"model_max_length": model_max_length} if model_max_length is not None else {}
    return BertTokenizerFast(
        tokenizer_object=build_backend(vocab, lowercase, strip_accents),
        do_lower_case=lowercase,
        strip_accents=strip_accents,
        tokenize_chinese_chars=True,
        # As BERT's own tokenizer: decode "don ' t" as "don't" (transformers 5 defaults to False for BERT).
        clean_up_tokenization_spaces=True,
        **SPECIAL_TOKENS,
        **kwargs,
    )


def check_vocab(
    vocab: dict[str, int] | list[str], source: str | os.PathLike, special_tokens: list[str] | None = None
) -> None:
    """Raise ValueError naming `source` and the token if a special token is missing.

    Without this check transformers silently appends missing special tokens after the vocabulary, giving ids
    beyond the model's embedding matrix.
    """
    present = set(vocab)
    for token in special_tokens or list(SPECIAL_TOKENS.values()):
        if token not in present:
            raise ValueError(f"{source}: the vocabulary lacks the special token {token!r}")


def read_vocab_file(path: str | os.PathLike) -> dict[str, int]:
    """Read a BERT `vocab.txt` (one token per line; the line number is the id)."""
    try:
        with open(path, encoding="utf-8") as f:
            # Split on "\n" only (not str.splitlines, which also breaks on U+2028, U+0085, ...), like BERT's reader.
            tokens = f.read().split("\n")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not valid UTF-8 ({err.reason} at byte {err.start})") from None
    if tokens and tokens[-1] == "":
        tokens.pop()
    vocab: dict[str, int] = {}
    for i, token in enumerate(tokens):
        if token in vocab:
            raise ValueError(f"{path}: token {token!r} appears twice (lines {vocab[token] + 1} and {i + 1})")
        vocab[token] = i
    return vocab


def load_tokenizer(path: str | os.PathLike, **kwargs) -> BertTokenizerFast:
    """Load a saved tokenizer folder (tokenizer.json and/or vocab.txt), or a bare BERT `vocab.txt` file.

    Every vocabulary file found is checked for the special tokens named in tokenizer_config.json (default:
    the BERT ones); a missing one raises ValueError naming the file and the token. `kwargs` go to
    `from_pretrained` (or, for a bare vocab.txt, may set `lowercase`, `strip_accents`, `model_max_length`).
    """
    path = Path(path)
    if path.is_file():
        vocab = read_vocab_file(path)
        check_vocab(vocab, path)
        return make_tokenizer(vocab, **kwargs)
    if not path.is_dir():
        raise FileNotFoundError(f"no tokenizer at {path}: expected a folder with {TOKENIZER_FILE} or {VOCAB_FILE}")
    tokenizer_json, vocab_txt = path / TOKENIZER_FILE, path / VOCAB_FILE
    if not tokenizer_json.is_file() and not vocab_txt.is_file():
        raise FileNotFoundError(f"{path} holds neither {TOKENIZER_FILE} nor {VOCAB_FILE}")

    special_tokens = list(SPECIAL_TOKENS.values())
    config_file = path / TOKENIZER_CONFIG_FILE
    if config_file.is_file():
        config = json.loads(config_file.read_text(encoding="utf-8"))
        special_tokens = [_token_content(config.get(key, default)) for key, default in SPECIAL_TOKENS.items()]

    vocabs = {}
    if tokenizer_json.is_file():
        model = json.loads(tokenizer_json.read_text(encoding="utf-8")).get("model", {})
        if model.get("type") != "WordPiece":
            raise ValueError(f"{tokenizer_json}: model type is {model.get('type')!r}, expected 'WordPiece'")
        vocabs[tokenizer_json] = model["vocab"]
    if vocab_txt.is_file():
        vocabs[vocab_txt] = read_vocab_file(vocab_txt)
    for source, vocab in vocabs.items():
        check_vocab(vocab, source, special_tokens)
    if len(vocabs) == 2 and vocabs[tokenizer_json] != vocabs[vocab_txt]:
        # transformers reads tokenizer.json and ignores vocab.txt: a silent mismatch would bite other tools.
        raise ValueError(f"{vocab_txt} and {tokenizer_json} hold different vocabularies")
    return BertTokenizerFast.from_pretrained(str(path), **kwargs)


def save_tokenizer(
    tokenizer: transformers.PreTrainedTokenizerBase, output_dir: str | os.PathLike, overwrite_output_dir: bool = False
) -> Path:
    """`save_pretrained` into a staging folder beside `output_dir`, then rename it into place.

    Readers never see a half-written folder. An existing non-empty `output_dir` raises FileExistsError
    unless `overwrite_output_dir`.
    """
    files = _files()
    output_dir = files.check_output_dir(output_dir, overwrite_output_dir)
    with files.staged_folder(output_dir) as staging:
        tokenizer.save_pretrained(staging)
    return output_dir


def _token_content(token) -> str:
    # tokenizer_config.json stores special tokens either as strings or as serialized AddedToken dicts.
    return token["content"] if isinstance(token, dict) else str(token)


def _files():
    """The project's atomic writers, imported when first needed: importing `modeling_minibert` loads torch and
    the model, which tokenizing does not need (a tokenizer folder must stay usable without them)."""
    import modeling_minibert.utils.files as files

    return files
