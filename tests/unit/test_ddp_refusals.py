"""What cannot be crossed over in a DDP script is found by reading it (never by running it), also in a module
next to the script."""

import re
import textwrap
from pathlib import Path

import pytest

from xover.errors import XoverError
from xover.scripts import ScriptRefused, check_ddp_script, check_horovod_script, detect_engine

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "recipes/examples/ddp_digits.py"
STEPS = 30
LOSS_LINE = re.compile(r"^(?:step \d+|final) loss \S+$", re.MULTILINE)


@pytest.mark.parametrize("line, problem", [
    ("model.register_comm_hook(None, hook)", "communication hook"),
    ("model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)", "SyncBatchNorm"),
])
def test_what_cannot_be_crossed_over_is_refused(tmp_path, line, problem):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import torch
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(torch.nn.Linear(2, 2))
        {line}
    """))
    with pytest.raises(ScriptRefused, match=f"--script {re.escape(str(script))}: .*{problem}"):
        check_ddp_script(script)


@pytest.mark.parametrize("source, problem", [
    ("from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\nmodel = FSDP(torch.nn.Linear(2, 2))",
     r"FSDP \(FullyShardedDataParallel\).*wrap the model in DistributedDataParallel"),
    ("import torch.distributed.fsdp\nmodel = torch.distributed.fsdp.FullyShardedDataParallel(torch.nn.Linear(2, 2))",
     r"FSDP \(FullyShardedDataParallel\).*wrap the model in DistributedDataParallel"),
    ("from torch.distributed.fsdp import fully_shard\nmodel = torch.nn.Linear(2, 2)\nfully_shard(model)",
     r"FSDP2 \(fully_shard\).*wrap the model in DistributedDataParallel"),
    ("from torch.distributed._composable.fsdp import fully_shard as shard\nshard(torch.nn.Linear(2, 2))",
     r"FSDP2 \(fully_shard\).*wrap the model in DistributedDataParallel"),
    # a name imported as another is used by it: before, `SBN.convert_sync_batchnorm` went unseen
    ("from torch.nn import SyncBatchNorm as SBN\nmodel = SBN.convert_sync_batchnorm(torch.nn.Linear(2, 2))",
     "SyncBatchNorm"),
])
def test_a_sharded_model_and_names_imported_as_others_are_refused(tmp_path, source, problem):
    script = tmp_path / "train.py"
    script.write_text("import torch\n" + source + "\n")
    with pytest.raises(ScriptRefused, match=f"--script {re.escape(str(script))}: .*{problem}"):
        check_ddp_script(script)
    # behind a flag: left to the shim, which refuses the FSDP model when the script steps without DDP
    guarded = [line if "import" in line else f"if sys.argv[1:]:\n    {line}" for line in source.splitlines()]
    script.write_text("import sys\nimport torch\n" + "\n".join(guarded) + "\n")
    check_ddp_script(script)


@pytest.mark.parametrize("source, shown", [
    ("import tensorflow as tf\nimport horovod.tensorflow.keras as hvd\nhvd.init()", "horovod.tensorflow.keras"),
    ("from horovod import tensorflow as hvd\nhvd.init()", "horovod.tensorflow"),
    ("import horovod.keras as hvd\nhvd.init()", "horovod.keras"),
    ("import mxnet\nimport horovod.mxnet as hvd\nhvd.init()", "horovod.mxnet"),
    ("import horovod.spark\nhorovod.spark.run(lambda: None)", "horovod.spark"),
    ("from horovod.ray import RayExecutor", "horovod.ray"),
])
def test_a_horovod_script_of_another_framework_than_pytorch_is_refused_before_it_runs(tmp_path, source, shown):
    # a Keras script was launched, and failed in its ranks: "No module named 'tensorflow'"
    script = tmp_path / "train.py"
    script.write_text(source + "\n")
    assert detect_engine(script).engine == "horovod"
    with pytest.raises(ScriptRefused, match=f"--script {re.escape(str(script))}: imports {re.escape(shown)} .*"
                                            "horovod.torch"):
        check_horovod_script(script)
    # a script that trains through horovod.torch and has another binding behind a flag is PyTorch's
    script.write_text("import sys\nif sys.argv[1:]:\n    import horovod.tensorflow as hvd\n"
                      "else:\n    import horovod.torch as hvd\nhvd.init()\n")
    check_horovod_script(script)


@pytest.mark.parametrize("source", [
    "import horovod.torch as hvd\nmodel = torch.nn.Sequential(torch.nn.Linear(2, 4), hvd.SyncBatchNorm(4))",
    # Horovod's synthetic benchmark: the class handed to torchvision as its norm layer
    "import horovod.torch as hvd\nfrom torchvision import models\nmodel = models.resnet50(norm_layer=hvd.SyncBatchNorm)",
    "from horovod.torch import SyncBatchNorm as SBN\nlayer = SBN(4)",
    "from horovod.torch.sync_batch_norm import SyncBatchNorm\nlayer = SyncBatchNorm(4)",
])
def test_horovods_sync_batch_norm_is_refused_before_the_script_runs(tmp_path, source):
    # its all-gathers in forward and all-reduces in backward held the turn while blocked; on a CPU it fails anyway
    script = tmp_path / "train.py"
    script.write_text("import sys\nimport torch\n" + source + "\n")
    with pytest.raises(ScriptRefused, match=f"--script {re.escape(str(script))}: uses hvd.SyncBatchNorm, .*"
                                            "use torch.nn.BatchNorm"):
        check_horovod_script(script)
    # behind a flag: left to the shim, which refuses it when built
    last = source.splitlines()[-1]
    script.write_text("import sys\nimport torch\n" + source.replace(last, f"if sys.argv[1:]:\n    {last}") + "\n")
    check_horovod_script(script)
    # torch's own BatchNorm in a Horovod script is no use of it
    script.write_text("import horovod.torch as hvd\nimport torch\nlayer = torch.nn.BatchNorm1d(4)\n")
    check_horovod_script(script)


def test_ddp_built_in_a_module_next_to_the_script_is_found(tmp_path):
    (tmp_path / "helpers.py").write_text("from torch.nn.parallel import DistributedDataParallel as DDP\n")
    (tmp_path / "train.py").write_text("from helpers import DDP\n")
    check_ddp_script(tmp_path / "train.py")
    (tmp_path / "broken.py").write_text("def f(:\n")
    with pytest.raises(ScriptRefused, match=r"broken.py: line 1: not valid Python"):
        check_ddp_script(tmp_path / "broken.py")


@pytest.mark.parametrize("source", [
    "from accelerate import Accelerator",  # Accelerate builds DDP itself
    "import lightning.pytorch as pl",
    "from transformers import Trainer",
    "import torch.distributed as dist\nfrom mylib import build_model",  # a library from elsewhere may build it
])
def test_a_script_whose_ddp_is_built_elsewhere_is_left_to_the_shim(tmp_path, source):
    script = tmp_path / "train.py"
    script.write_text(source + "\n")
    check_ddp_script(script)  # whether DDP is built is seen when it runs


def test_a_horovod_script_is_refused_as_a_ddp_script(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import horovod.torch as hvd\n")
    with pytest.raises(ScriptRefused, match=r"no DistributedDataParallel .* imports horovod.torch; --engine torch"):
        check_ddp_script(script)


def test_what_a_script_does_only_behind_a_flag_is_left_to_the_shim(tmp_path):
    """torchvision's reference scripts convert to SyncBatchNorm only `if args.sync_bn:`: refused by its name
    before, whether the flag was given or not; now the shim refuses it where it is used (at DDP's build)."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import argparse
        import torch
        from torch.nn import SyncBatchNorm
        from torch.nn.parallel import DistributedDataParallel
        args = argparse.ArgumentParser().parse_args()
        model = torch.nn.Linear(2, 2)
        if args.sync_bn:
            model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        elif args.hook:
            model.register_comm_hook(None, None)
        model = SyncBatchNorm.convert_sync_batchnorm(model) if args.other else model
        model = DistributedDataParallel(model)
    """))
    check_ddp_script(script)  # nothing refused: every use is behind a flag, the import alone uses nothing
    script.write_text(script.read_text() + "model = SyncBatchNorm.convert_sync_batchnorm(model)\n")
    with pytest.raises(ScriptRefused, match="SyncBatchNorm"):
        check_ddp_script(script)


def test_a_helper_of_a_module_that_is_never_called_is_no_use_of_what_it_names(tmp_path):
    # a package's utilities often hold a SyncBatchNorm converter the script calls only if asked: a module runs
    # its top level on import, its functions only when called (the shim refuses what is used when it runs)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "utils.py").write_text(textwrap.dedent("""
        import torch

        def sync_bn(model):
            return torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    """))
    (tmp_path / "pkg" / "trainer.py").write_text("from .utils import sync_bn\n")
    script = tmp_path / "train.py"
    script.write_text("import torch\nfrom torch.nn.parallel import DistributedDataParallel\nimport pkg.trainer\n")
    check_ddp_script(script)
    # at a module's top level it runs on import: refused, through the package's relative import
    (tmp_path / "pkg" / "utils.py").write_text("import torch\nNORM = torch.nn.SyncBatchNorm\n")
    with pytest.raises(ScriptRefused, match="SyncBatchNorm"):
        check_ddp_script(script)
    # in the script itself a function is its own (`main()`): refused as before
    (tmp_path / "pkg" / "utils.py").write_text("")
    script.write_text(script.read_text() + "def main(model):\n    model.register_comm_hook(None, None)\n")
    with pytest.raises(ScriptRefused, match="communication hook"):
        check_ddp_script(script)


DEEPSPEED = """
import deepspeed
import torch
model = torch.nn.Linear(2, 2)
engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config="ds.json")
"""


def test_a_script_that_trains_through_deepspeed_is_told_why_whatever_its_engine_shows(tmp_path):
    # DeepSpeed's engine reduces the gradients itself: the script's engine could not be told ("pass --engine
    # torch"), and given --engine torch it failed at its first step ("before any DistributedDataParallel model")
    script = tmp_path / "train.py"
    script.write_text(DEEPSPEED)
    said = r"--script .*train.py: trains through DeepSpeed \(deepspeed.initialize\).*wrap the model in DistributedDataParallel"
    with pytest.raises(XoverError, match=said):
        detect_engine(script)
    script.write_text("import torch.distributed as dist\n" + DEEPSPEED)
    assert detect_engine(script).engine == "torch"
    with pytest.raises(ScriptRefused, match=said):
        check_ddp_script(script)
    # behind a flag, beside DDP (scripts that train either way): left to run
    script.write_text(DEEPSPEED.replace("engine, optimizer", "if sys.argv[1:]:\n    engine, optimizer").replace(
        "import torch\n", "import sys\nimport torch\nfrom torch.nn.parallel import DistributedDataParallel\n"))
    check_ddp_script(script)


@pytest.mark.parametrize("module, setting", [
    ("accelerate.utils.dataclasses", "DistributedDataParallelKwargs(comm_hook="),
    ("lightning.pytorch.overrides.distributed", "DDPStrategy(ddp_comm_hook="),
    ("train", None),
])
def test_a_communication_hook_a_framework_registers_is_refused_naming_its_setting(capsys, module, setting):
    # a probe, 2026-12-07: Accelerate's DistributedDataParallelKwargs(comm_hook=...) was refused as a hook the
    # script registers, "remove it" - a call the script does not make
    from xover.runtime.ddp_shim import DDPCrossover

    refuse = DDPCrossover(None, "train.py")._comm_hook_refusal("registers another DDP communication hook: remove it")
    registering = {"__name__": module, "refuse": refuse}
    exec("def register_comm_hook(model):\n    refuse(model, None, None)\n", registering)
    with pytest.raises(SystemExit) as exited:
        registering["register_comm_hook"](None)
    assert exited.value.code == ScriptRefused.exit_code
    said = capsys.readouterr().err
    if setting is None:
        assert said == "xover: train.py: registers another DDP communication hook: remove it\n"
    else:
        assert setting in said and "leave that setting out" in said and "remove it" not in said, said
