"""Distributed pretraining that is the same run (modeling_minibert/training/pretraining/: loop.py, data.py's
`RunBatches`, run_folder.py's `keep_global_batch`): DDP over gloo on CPU matches one process with gradient
accumulation, a run checkpointed with 2 processes resumes with 1 and one checkpointed with 1 resumes with 2 on the
uninterrupted loss curve, a number of processes that cannot keep the global batch is refused in one line, the data
wait is measured, and an FSDP config on CPU says what it runs as."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from itertools import islice

import numpy as np
import pytest
import torch
from fixtures.environment import run_python
from fixtures.pretraining import (  # noqa: F401 (fixtures)
    PYTHON,
    cli_args,
    corpus,
    free_port,
    pytestmark,
    read_metrics,
    subprocess_env,
    tiny,
    tokenizer_dir,
)
from safetensors.torch import load_file
from transformers import AutoModelForPreTraining

import modeling_minibert
from modeling_minibert import cli
from modeling_minibert.training.pretraining import PretrainingArguments, pretrain
from modeling_minibert.training.pretraining.data import DATA_WAIT, RunBatches, ShuffledOrder
from modeling_minibert.training.pretraining.run_folder import ARGS_FILE, PROCESSES, keep_global_batch
from modeling_minibert.utils.outputs import results_file

TRAIN_RESULTS_FILE = results_file("train")

pytestmark = [pytestmark, pytest.mark.slow(seconds=107)]  # real jobs end to end: not in the quick tier (-m "not slow")


# --- the run's batches: one sequence, whatever the number of processes ----------------------------------------


def batches_of_each_step(
    examples: int, batch_size: int, processes: int, accumulation: int, steps: int, start_step: int = 0
):
    """For each optimizer step, the set of micro-batches (as tuples of example indices) all processes train on."""
    per_step = processes * accumulation
    streams = [
        iter(
            RunBatches(
                examples, batch_size, seed=7, num_processes=processes, process_index=rank, start=start_step * per_step
            )
        )
        for rank in range(processes)
    ]
    return [{tuple(next(stream).indices) for stream in streams for _ in range(accumulation)} for _ in range(steps)]


def test_one_process_with_accumulation_takes_the_batches_that_processes_share_out_across_epochs():
    """46 examples in batches of 4: 11 batches an epoch, which 2 processes cannot share out evenly; no batch is
    padded or repeated at an epoch's end, and a run resumed mid-epoch with another number of processes continues."""
    one = batches_of_each_step(46, 4, processes=1, accumulation=2, steps=30)
    assert batches_of_each_step(46, 4, processes=2, accumulation=1, steps=30) == one
    assert batches_of_each_step(46, 4, processes=2, accumulation=1, steps=13, start_step=17) == one[17:]
    assert batches_of_each_step(46, 4, processes=1, accumulation=2, steps=13, start_step=17) == one[17:]
    epochs = [list(islice(RunBatches(46, 4, seed=7, start=11 * e), 11)) for e in range(3)]
    for number, epoch in enumerate(epochs):
        assert {b.epoch for b in epoch} == {number} and len({i for b in epoch for i in b.indices}) == 44
    assert epochs[0][0].indices != epochs[1][0].indices, "each epoch has its own order"


def test_each_epochs_order_is_a_seeded_permutation_that_is_never_stored():
    """`ShuffledOrder`: every epoch's order is a permutation of the examples, its own for each (seed, epoch) and
    the same again on replay, drawn evenly, and computed for a batch at a time whatever the number of examples."""
    for n in (1, 2, 46, 1000, 65_537):
        orders = [RunBatches(n, 1, seed=7).order(epoch) for epoch in range(3)]
        assert all(sorted(order) == list(range(n)) for order in orders)
        assert n < 46 or len({tuple(order) for order in orders}) == 3
    assert (
        RunBatches(46, 4, seed=7).order(2) == RunBatches(46, 4, seed=7).order(2) != RunBatches(46, 4, seed=8).order(2)
    )
    # Where example 0 lands over 3,000 epochs of 10: each place about 300 times (a chi-square test at p = 0.001).
    places = [ShuffledOrder(10, 3)(epoch, np.arange(10)).tolist().index(0) for epoch in range(3000)]
    counts = np.bincount(places, minlength=10)
    assert ((counts - 300) ** 2 / 300).sum() < 27.9
    # A trillion examples: one batch's order, without an array of a trillion.
    batch = next(iter(RunBatches(10**12, 32, seed=7, start=10**9)))
    assert len(set(batch.indices)) == 32 and all(0 <= i < 10**12 for i in batch.indices)


def test_data_loader_workers_mask_as_the_training_process_does(tiny, tmp_path):
    """`--dataloader_num_workers`: batches collated ahead in another process train exactly as the loop's own, a
    masking-rate schedule included (every batch carries its place in the run)."""
    settings = dict(tiny, max_steps=4, save_steps=4, eval_steps=4, final_mlm_probability=0.2)
    pretrain(output_dir=str(tmp_path / "in-process"), **settings)
    pretrain(output_dir=str(tmp_path / "worker"), dataloader_num_workers=1, **settings)
    assert read_metrics(tmp_path / "worker") == read_metrics(tmp_path / "in-process")


# --- the global batch on resume ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "processes, accumulation, expected",
    [
        (2, 1, 1),  # as it started
        (1, 1, 2),  # the run's own value, adapted
        (1, 2, 2),  # given to match
        (
            4,
            1,
            r"cannot resume the run in \S+ with 4 processes: its global batch is 16 examples \(2 process\(es\) x "
            r"gradient_accumulation_steps=1 x per_device_train_batch_size=8\), and 4 processes cannot share out its "
            r"2 micro-batches per step; use a number of processes that divides 2$",
        ),
        (
            1,
            3,
            r"cannot resume the run in \S+ with gradient_accumulation_steps=3 on 1 process\(es\): its global batch is "
            r"16 examples .*; pass 2, or leave it as the run started$",
        ),
    ],
)
def test_a_resume_keeps_the_global_batch_or_is_refused_in_one_line(tmp_path, processes, accumulation, expected):
    (tmp_path / ARGS_FILE).write_text(json.dumps({"gradient_accumulation_steps": 1, PROCESSES: 2}))
    args = PretrainingArguments(gradient_accumulation_steps=accumulation, per_device_train_batch_size=8)
    if isinstance(expected, int):
        assert keep_global_batch(tmp_path, args, processes) == expected
    else:
        with pytest.raises(ValueError, match=expected):
            keep_global_batch(tmp_path, args, processes)
    (tmp_path / ARGS_FILE).write_text(json.dumps({"gradient_accumulation_steps": 1}))  # written before the count was
    assert keep_global_batch(tmp_path, PretrainingArguments(), processes) == 1


def test_the_command_refuses_a_global_batch_it_cannot_keep_in_one_line_before_any_work(tiny, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    settings = dict(tiny, output_dir=str(out), max_steps=4)
    identity = PretrainingArguments(**settings).identity()
    (out / ARGS_FILE).write_text(json.dumps({**identity, PROCESSES: 2}))
    code = cli.main(
        ["pretrain", *cli_args(**settings), "--gradient_accumulation_steps", "3", "--resume_from_checkpoint"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(
        f"minibert pretrain: error: cannot resume the run in {out} with gradient_accumulation_steps=3"
    )
    assert [p.name for p in out.iterdir()] == [ARGS_FILE], "nothing was written"


# --- FSDP on CPU --------------------------------------------------------------------------------------------------


def test_an_fsdp_config_on_cpu_says_in_one_line_that_it_runs_without_fsdp(tiny, tmp_path, capsys, monkeypatch):
    """`accelerate launch --config_file fsdp.yaml` sets ACCELERATE_USE_FSDP; Accelerate applies FSDP on GPUs only."""
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    assert cli.main(["pretrain", *cli_args(**dict(tiny, output_dir=tmp_path / "run", max_steps=2))]) == 0
    assert capsys.readouterr().err.strip().splitlines() == [
        "minibert pretrain: warning: an FSDP config on cpu: Accelerate applies FSDP on GPUs only, so this run is a "
        "single process (the same steps, every process holding the whole model)"
    ]


# Launched on each rank: `minibert pretrain` under FSDP2 on the CPU. Accelerate applies FSDP on GPUs only (see
# above), while torch's `fully_shard` runs over gloo: the launcher sets the FSDP state a GPU launch with the docs'
# fsdp.yaml would have (FSDP2, MiniBertLayer wrapped, sharded checkpoints), and Accelerate then shards the model
# with `fully_shard` and checkpoints it as on GPUs.
FSDP2_ON_CPU = textwrap.dedent("""
    import sys
    import accelerate
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
    init = accelerate.Accelerator.__init__
    def fsdp2_on_cpu(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.state.fsdp_plugin = FullyShardedDataParallelPlugin(
            fsdp_version=2, auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["MiniBertLayer"],
            state_dict_type="SHARDED_STATE_DICT", reshard_after_forward=True)
        self.state.distributed_type = PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    accelerate.Accelerator.__init__ = fsdp2_on_cpu
    from modeling_minibert.cli import console_main
    sys.exit(console_main(sys.argv[1:]))
""")

# What a folder that loads without the package holds, and what it must not (torch's FSDP2 module files, which
# transformers copied in place of the model's when it saved FSDP2's generated class).
MODEL_CODE = {"modeling_minibert.py", "configuration_minibert.py", "checks_minibert.py"}


def assert_loads_without_the_package(folders: list, tmp_path) -> None:
    """Each folder names the model's own class and holds its code and an auto_map naming every head; a fresh
    interpreter that cannot import this project loads it with trust_remote_code and gets the weights on disk."""
    for folder in folders:
        config = json.loads((folder / "config.json").read_text())
        assert config["architectures"] == ["MiniBertForPreTraining"], folder
        assert config["auto_map"]["AutoModelForPreTraining"] == "modeling_minibert.MiniBertForPreTraining"
        assert config["auto_map"]["AutoConfig"] == "configuration_minibert.MiniBertConfig"
        files = {p.name for p in folder.iterdir() if p.suffix == ".py"}
        assert files == MODEL_CODE, (folder, files)
    code = textwrap.dedent(f"""
        import json
        from transformers import AutoModelForPreTraining
        sums = {{}}
        for folder in {[str(f) for f in folders]!r}:
            model = AutoModelForPreTraining.from_pretrained(folder, trust_remote_code=True)
            sums[folder] = [type(model).__name__, float(model.bert.encoder.layer[0].attention.self.query.weight.sum())]
        print(json.dumps(sums))
    """)
    loaded = json.loads(run_python(code, cwd=tmp_path).strip().splitlines()[-1])
    for folder in folders:
        expected = float(
            load_file(folder / "model.safetensors")["bert.encoder.layer.0.attention.self.query.weight"].sum()
        )
        assert loaded[str(folder)] == ["MiniBertForPreTraining", pytest.approx(expected, rel=1e-6)], folder


# What an FSDP2 training script does at its end: the model sharded by `fully_shard` (each layer, then the root),
# its full state dict gathered on every rank, `save_pretrained` on rank 0.
FULLY_SHARDED_SAVE = textwrap.dedent("""
    import sys
    import torch, torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import fully_shard
    from modeling_minibert import MiniBertConfig, MiniBertForPreTraining
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = MiniBertForPreTraining(MiniBertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                                  num_attention_heads=2, intermediate_size=64))
    for layer in model.bert.encoder.layer:
        fully_shard(layer)
    fully_shard(model)
    assert type(model).__name__ == "FSDPMiniBertForPreTraining"
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() == 0:
        model.save_pretrained(sys.argv[1], state_dict=full)
        assert type(model).__name__ == "FSDPMiniBertForPreTraining", "the model is left as FSDP2 made it"
    dist.destroy_process_group()
""")


def test_a_model_sharded_by_fully_shard_saves_a_folder_that_loads_without_the_package(tmp_path):
    """FSDP2 (2 processes over gloo) swaps the model's class for `FSDPMiniBertForPreTraining`, defined in torch:
    saved as that, the folder named it and held seven of torch's `_fsdp_*.py` files instead of the model's code,
    and did not load. (One process: the loop's resume in the test below.)"""
    processes = 2
    script, folder = tmp_path / "save.py", tmp_path / "saved"
    script.write_text(FULLY_SHARDED_SAVE)
    done = subprocess.run(
        [
            PYTHON,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            str(processes),
            "--master_port",
            str(free_port()),
            str(script),
            str(folder),
        ],
        env=subprocess_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert_loads_without_the_package([folder], tmp_path)


@pytest.mark.slow(seconds=40)
def test_fsdp2_checkpoints_and_the_final_folder_load_without_the_package_and_resume_with_fewer_processes(
    tiny, tmp_path
):
    """FSDP2 (`fully_shard`, 2 processes over gloo) through the loop: every checkpoint and the final folder name
    MiniBertForPreTraining and hold its code, not FSDP2's generated `FSDPMiniBertForPreTraining` and torch's
    files; they load without the package. Resumed from the sharded step-2 checkpoint with 1 process, the run
    continues the uninterrupted curve."""
    script = tmp_path / "fsdp2_on_cpu.py"
    script.write_text(FSDP2_ON_CPU)
    settings = dict(tiny, max_steps=4, save_steps=2, eval_steps=2, logging_steps=1, save_total_limit=3)
    run = tmp_path / "run"
    env = subprocess_env(tmp_path)
    torchrun = [
        PYTHON,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(free_port()),
        str(script),
    ]
    done = subprocess.run(
        [*torchrun, "pretrain", "--output_dir", str(run), *cli_args(**settings)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 process(es) x 1 micro-batch(es) of 8 a step (FSDP)" in done.stdout
    assert (run / "checkpoint-2" / "pytorch_model_fsdp_0").is_dir(), "a sharded checkpoint, as FSDP2 writes it"
    assert_loads_without_the_package([run, run / "checkpoint-2", run / "checkpoint-4"], tmp_path)

    resumed = tmp_path / "resumed"
    shutil.copytree(run, resumed)
    torchrun[torchrun.index("2")] = "1"
    again = subprocess.run(
        [
            *torchrun,
            "pretrain",
            "--output_dir",
            str(resumed),
            *cli_args(**settings),
            "--resume_from_checkpoint",
            str(resumed / "checkpoint-2"),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert (
        "1 process(es) x 2 micro-batch(es) of 8 a step (FSDP)" in again.stdout and "resuming at step 2" in again.stdout
    )
    assert_same_curve(read_metrics(resumed), read_metrics(run), after=2)


# Two ranks over gloo; rank 1 has been signalled. The accelerator stands in for one on GPUs (a device that is not
# the CPU), whose processes agree over a gloo group of the hosts made for that.
STOP_ON_ONE_RANK = textwrap.dedent("""
    import json, sys, types
    import torch, torch.distributed as dist
    from modeling_minibert.training.pretraining import session
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    accelerator = types.SimpleNamespace(num_processes=2, device=torch.device("meta"))
    stop = types.SimpleNamespace(signal=15 if rank == 1 else None)
    answers = [session.stop_requested(stop, accelerator),
               session.stop_requested(types.SimpleNamespace(signal=None), accelerator)]
    group = session.host_group(accelerator)
    print(json.dumps({"answers": answers, "backend": dist.get_backend(group), "groups": len(session._HOST_GROUPS)}))
    dist.destroy_process_group()
""")


def test_a_stop_signal_on_one_process_stops_every_process_agreed_between_the_hosts(tmp_path):
    script = tmp_path / "stop.py"
    script.write_text(STOP_ON_ONE_RANK)
    done = subprocess.run(
        [
            PYTHON,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            str(free_port()),
            "--tee",
            "1",
            str(script),
        ],
        env=subprocess_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line.split(":", 1)[1]) for line in done.stdout.splitlines() if '"answers"' in line]
    assert lines == [{"answers": [True, False], "backend": "gloo", "groups": 1}] * 2


# --- DDP ----------------------------------------------------------------------------------------------------------

# Launched on each rank: runs `minibert pretrain`, and at the end saves this rank's own weights, so that the
# test can compare the ranks (the run itself saves the main process's only).
RANK_WEIGHTS = textwrap.dedent("""
    import sys
    import accelerate
    from safetensors.torch import save_file
    end_training = accelerate.Accelerator.end_training
    def save_rank_weights(self):
        model = self._models[0]
        state = {k: v.detach().clone().contiguous() for k, v in self.unwrap_model(model).state_dict().items()
                 if "decoder.weight" not in k}
        save_file(state, f"{sys.argv[1]}/rank{self.process_index}.safetensors")
        end_training(self)
    accelerate.Accelerator.end_training = save_rank_weights
    from modeling_minibert.cli import console_main
    sys.exit(console_main(sys.argv[2:]))
""")


def launch(processes: int) -> list[str]:
    """`accelerate launch` of `processes` CPU processes (DDP over gloo: `--multi_gpu`; its `--cpu` starts one)."""
    return [
        PYTHON,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        str(processes),
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
    ]


def assert_same_curve(resumed: list[dict], uninterrupted: list[dict], after: int) -> None:
    """Every number logged after step `after` (losses, accuracies, learning rates, held-out scores) within 1e-4."""
    later = [r for r in uninterrupted if r["step"] > after]
    assert [r["step"] for r in resumed if r["step"] > after] == [r["step"] for r in later]
    for got, want in zip([r for r in resumed if r["step"] > after], later):
        assert got.keys() == want.keys() and got == pytest.approx(want, rel=1e-4), (got, want)


@pytest.mark.slow(seconds=40)
def test_ddp_matches_one_process_and_a_run_resumes_with_another_number_of_processes(tiny, tmp_path):
    """DDP over gloo on CPU. Each rank takes 8 examples per step; one process with 2 micro-batches of 8 (gradient
    accumulation) sees the same 16 examples with the same masks, so the trained weights must agree up to summation
    order (tolerance 1e-5), dropout noise and masking rate included. Then the 2-process run, resumed from its step-6 checkpoint with 1 process (which takes
    2 micro-batches a step by itself, saying so), and the 1-process run resumed with 2, continue the uninterrupted
    runs' curves: every number logged after step 6 within 1e-4."""
    script = tmp_path / "rank_weights.py"
    script.write_text(RANK_WEIGHTS)
    # With dropout and a masking-rate schedule: the noise and the rate follow the micro-batch's place in the step.
    settings = dict(
        tiny,
        max_steps=12,
        save_steps=6,
        eval_steps=6,
        logging_steps=3,
        learning_rate=2e-3,
        pretraining_dropout=0.1,
        final_mlm_probability=0.2,
    )
    ddp, single = tmp_path / "ddp", tmp_path / "single"
    for folder in (ddp, single):
        folder.mkdir()
    env = subprocess_env(tmp_path)
    two = subprocess.Popen(
        [*launch(2), str(script), str(tmp_path), "pretrain", "--output_dir", str(ddp / "run"), *cli_args(**settings)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    one = subprocess.run(
        [
            PYTHON,
            str(script),
            str(single),
            "pretrain",
            "--output_dir",
            str(single / "run"),
            *cli_args(**dict(settings, gradient_accumulation_steps=2)),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    stdout, stderr = two.communicate(timeout=300)
    assert two.returncode == 0, stderr[-3000:]
    assert one.returncode == 0, one.stderr[-3000:]
    assert "2 process(es) x 1 micro-batch(es) of 8 a step (DDP over gloo)" in stdout
    assert stdout.count("saved the pretrained model and tokenizer to") == 1

    rank0, rank1 = load_file(tmp_path / "rank0.safetensors"), load_file(tmp_path / "rank1.safetensors")
    alone = load_file(single / "rank0.safetensors")
    assert all(torch.equal(rank0[k], rank1[k]) for k in rank0), "the ranks' gradients were synchronised"
    for key in rank0:
        torch.testing.assert_close(rank0[key], alone[key], atol=1e-5, rtol=1e-4, msg=lambda m: f"{key}: {m}")
    assert_loads_without_the_package([ddp / "run", ddp / "run" / "checkpoint-12"], tmp_path)
    initial = modeling_minibert.MiniBertForPreTraining(AutoModelForPreTraining.from_pretrained(ddp / "run").config)
    assert not torch.equal(
        rank0["bert.encoder.layer.0.attention.self.query.weight"],
        initial.bert.encoder.layer[0].attention.self.query.weight,
    )

    curve, alone_curve = read_metrics(ddp / "run"), read_metrics(single / "run")
    losses = [r["loss"] for r in curve if "loss" in r]
    assert [r["step"] for r in curve if "loss" in r] == [3, 6, 9, 12]
    assert losses[-1] < losses[0] - 0.1, "the loss falls"
    assert_same_curve(alone_curve, curve, after=0)
    train = json.loads((ddp / "run" / TRAIN_RESULTS_FILE).read_text())
    assert train["epoch"] == pytest.approx(12 * 8 * 2 / train["train_samples"], abs=0.01)  # 2 x 8 per step
    for folder in (ddp, single):  # the share of step time spent waiting for batches, logged with 1 and 2 processes
        waits = [r[DATA_WAIT] for r in read_metrics(folder / "run", timings=True) if "loss" in r]
        assert len(waits) == 4 and all(0 <= w < 1 for w in waits)
        assert 0 <= json.loads((folder / "run" / TRAIN_RESULTS_FILE).read_text())[f"train_{DATA_WAIT}"] < 1

    # Resumed across world sizes, each from a copy of the run's step-6 checkpoint.
    two_to_one, one_to_two = tmp_path / "two-to-one", tmp_path / "one-to-two"
    shutil.copytree(ddp / "run", two_to_one)
    shutil.copytree(single / "run", one_to_two)
    as_two = subprocess.Popen(
        [
            *launch(2),
            "-m",
            "modeling_minibert.cli",
            "pretrain",
            "--output_dir",
            str(one_to_two),
            *cli_args(**dict(settings, gradient_accumulation_steps=2)),
            "--resume_from_checkpoint",
            str(one_to_two / "checkpoint-6"),
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with pytest.warns(
        UserWarning,
        match=r"^resuming with 1 process\(es\): gradient_accumulation_steps=2 \(not 1\) keeps "
        r"the run's global batch$",
    ):
        as_one = pretrain(
            output_dir=str(two_to_one), **dict(settings, resume_from_checkpoint=str(two_to_one / "checkpoint-6"))
        )
    stdout, stderr = as_two.communicate(timeout=300)
    assert as_two.returncode == 0, stderr[-3000:]
    assert "2 process(es) x 1 micro-batch(es) of 8 a step" in stdout and "resuming at step 6" in stdout
    assert stderr.count("warning: resuming with 2 process(es): gradient_accumulation_steps=1 (not 2)") == 1
    assert as_one["steps_this_session"] == 6
    assert_same_curve(read_metrics(two_to_one), curve, after=6)
    assert_same_curve(read_metrics(one_to_two), alone_curve, after=6)
    for resumed, uninterrupted in ((two_to_one, ddp / "run"), (one_to_two, single / "run")):
        torch.testing.assert_close(
            load_file(resumed / "model.safetensors"),
            load_file(uninterrupted / "model.safetensors"),
            atol=1e-5,
            rtol=1e-4,
        )
