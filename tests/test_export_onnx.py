"""ONNX export: dynamic axes, outputs equal to PyTorch under onnxruntime; bad places refused before the work."""

import shutil
import tempfile
from pathlib import Path

import onnxruntime
import pytest
import torch
from fixtures.models import TINY

from modeling_minibert import MiniBertConfig, MiniBertForPreTraining
from modeling_minibert.cli import main as cli_main
from modeling_minibert.export_onnx import example_inputs, export_onnx


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("model")
    torch.manual_seed(0)
    MiniBertForPreTraining(MiniBertConfig(**TINY)).save_pretrained(path)
    return path


def test_pretraining_heads_export_and_match_pytorch_on_new_shapes(folder, tmp_path):
    path = export_onnx(folder, tmp_path / "out" / "model.onnx")
    session = onnxruntime.InferenceSession(str(path))
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask", "token_type_ids"]
    assert [o.name for o in session.get_outputs()] == ["prediction_logits", "seq_relationship_logits"]
    # The padded PyTorch path is compared everywhere, padding positions included.
    model = MiniBertForPreTraining.from_pretrained(folder, unpad_inputs=False).eval()
    for batch_size, seq_len in ((1, 5), (4, TINY["max_position_embeddings"])):
        ids, mask, types = example_inputs(model.config, batch_size, seq_len, None, seed=batch_size)
        got = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": types.numpy()})
        with torch.no_grad():
            expected = model(ids, attention_mask=mask, token_type_ids=types)
        torch.testing.assert_close(torch.from_numpy(got[0]), expected.prediction_logits, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(torch.from_numpy(got[1]), expected.seq_relationship_logits, atol=1e-4, rtol=1e-4)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["model.onnx"]  # no staging leftovers


def test_cli_exports_the_base_model(folder, tmp_path, capsys):
    assert cli_main(["export-onnx", str(folder), str(tmp_path / "base.onnx"), "--head", "MiniBertModel"]) == 0
    assert "wrote" in capsys.readouterr().out
    session = onnxruntime.InferenceSession(str(tmp_path / "base.onnx"))
    assert [o.name for o in session.get_outputs()] == ["last_hidden_state", "pooler_output"]


def test_unknown_head_is_refused(folder, tmp_path):
    with pytest.raises(ValueError, match=r"unknown head 'BertModel'; choose one of MiniBertModel"):
        export_onnx(folder, tmp_path / "x.onnx", head="BertModel")
    assert not (tmp_path / "x.onnx").exists()


@pytest.fixture
def read_only_dir(tmp_path):
    """A folder nobody may write to; root ignores permission bits, so for root a place even it cannot write."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    for place in (folder, Path("/sys/kernel")):
        try:
            tempfile.mkdtemp(dir=place)
        except OSError:
            yield place
            break
    else:
        pytest.skip("no read-only place on this machine")
    folder.chmod(0o755)


def test_export_to_a_read_only_place_is_one_line(folder, read_only_dir, capsys):
    output = read_only_dir / "model.onnx"
    with pytest.raises(OSError, match=rf"cannot write {output}: "):
        export_onnx(folder, output)
    assert cli_main(["export-onnx", str(folder), str(output)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"minibert export-onnx: error: cannot write {output}") and err.count("\n") == 1


def test_existing_output_is_refused_before_any_export_work(folder, tmp_path, monkeypatch, capsys):
    def no_export(*args, **kwargs):
        raise AssertionError("the export started")

    monkeypatch.setattr(torch.onnx, "export", no_export)
    existing = tmp_path / "model.onnx"
    existing.write_bytes(b"keep me")
    with pytest.raises(FileExistsError, match=rf"{existing} already exists; pass overwrite=True \(--overwrite\)"):
        export_onnx(folder, existing)
    with pytest.raises(FileExistsError, match=rf"{tmp_path} is a folder; give the path of the .onnx file"):
        export_onnx(folder, tmp_path)
    assert cli_main(["export-onnx", str(folder), str(existing)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert existing.read_bytes() == b"keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]  # no staging leftovers


def test_overwrite_replaces_an_existing_file(folder, tmp_path):
    existing = tmp_path / "model.onnx"
    existing.write_bytes(b"old")
    export_onnx(folder, existing, head="MiniBertModel", verify=False, overwrite=True)
    assert [o.name for o in onnxruntime.InferenceSession(str(existing)).get_outputs()] == [
        "last_hidden_state", "pooler_output",
    ]


def test_folder_without_weights_or_missing_is_one_line(folder, tmp_path, capsys):
    empty = tmp_path / "no-weights"
    shutil.copytree(folder, empty)
    (empty / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"no-weights holds no model weights \(no model.safetensors\)"):
        export_onnx(empty, tmp_path / "out.onnx")
    with pytest.raises(FileNotFoundError, match=r"model folder .*nowhere does not exist"):
        export_onnx(tmp_path / "nowhere", tmp_path / "out.onnx")
    for source in (empty, tmp_path / "nowhere"):
        assert cli_main(["export-onnx", str(source), str(tmp_path / "out.onnx")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("minibert export-onnx: error: ") and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["no-weights"]  # nothing written, no staging left
