"""A script's engine found from what it imports (never by running it), and a failed job's reason
picked from its error text (the CLI's refusal: tests/integration/test_script_engine_cli.py)."""

import textwrap
from pathlib import Path

import pytest

from xover.errors import XoverError
from xover.report.tables import failed_jobs, failure_line, failure_reason
from xover.run.targets import groups_from_scripts
from xover.scripts import detect_engine, detect_scripts_engine, detection_note, engine_from_source


def _engine(source: str) -> str:
    return engine_from_source(textwrap.dedent(source), "train.py").engine


@pytest.mark.parametrize("source", [
    "import horovod.torch as hvd\nhvd.init()",
    "from horovod import torch as hvd",
    "import horovod",
    "from horovod.torch import DistributedOptimizer",
    # DistributedSampler's module is not torch.distributed
    "import horovod.torch as hvd\nfrom torch.utils.data.distributed import DistributedSampler",
])
def test_a_script_importing_horovod_is_a_horovod_script(source):
    assert _engine(source) == "horovod"


@pytest.mark.parametrize("source", [
    "import torch.distributed as dist",
    "import torch.distributed",
    "from torch import distributed as dist",
    "from torch.distributed import init_process_group",
    "from torch.nn.parallel import DistributedDataParallel as DDP",  # the DDP class alone
    "import torch\nmodel = torch.nn.parallel.DistributedDataParallel(net)",  # attribute use only
    "from torch import nn\nmodel = nn.parallel.DistributedDataParallel(net)",
    "import torch\ntorch.distributed.init_process_group('gloo')",
    "import torch.nn.parallel\nDDP = torch.nn.parallel.DistributedDataParallel",
    """
    def main():
        import torch.distributed as dist  # imports inside functions count too
        dist.init_process_group("gloo")
    """,
])
def test_a_script_using_torch_distributed_is_a_torch_script(source):
    assert _engine(source) == "torch"


def test_the_name_that_showed_the_engine_is_kept():
    found = engine_from_source("import torch\nimport torch.distributed as dist\n", "train.py")
    assert (found.script, found.engine, found.evidence) == ("train.py", "torch", "torch.distributed")


@pytest.mark.parametrize("source", [
    "import horovod.torch as hvd\nimport torch.distributed as dist",
    "from horovod import torch as hvd\nfrom torch.nn.parallel import DistributedDataParallel",
])
def test_a_script_importing_both_is_refused_naming_it(source):
    with pytest.raises(XoverError, match=r"--script train.py: imports both horovod .* pass --engine"):
        engine_from_source(source, "train.py")


@pytest.mark.parametrize("source", [
    "import torch\nfrom torch import nn\nmodel = nn.Linear(2, 2)",
    "import os\nprint('hello')",
    "from torch.utils.data.distributed import DistributedSampler",  # not torch.distributed
    "distributed = 1\nDistributedDataParallel = None",  # names, not imports
    "from .local import dist",  # relative: nothing known
])
def test_a_script_importing_neither_is_refused_naming_it(source):
    with pytest.raises(XoverError, match=r"--script train.py: imports neither .* pass --engine"):
        engine_from_source(source, "train.py")


def test_the_examples(tmp_path):
    assert detect_engine("recipes/examples/horovod_digits.py").engine == "horovod"
    assert detect_engine("recipes/examples/ddp_digits.py").engine == "torch"


def test_what_the_scripts_own_modules_import_counts(tmp_path):
    (tmp_path / "helpers.py").write_text("from torch.nn.parallel import DistributedDataParallel as DDP\n")
    (tmp_path / "train.py").write_text("from helpers import DDP\n")
    assert detect_engine(tmp_path / "train.py").engine == "torch"
    (tmp_path / "broken.py").write_text("def f(:\n")
    with pytest.raises(XoverError, match=r"broken.py: line 1: not valid Python"):
        detect_engine(tmp_path / "broken.py")


def test_the_scripts_of_a_group_share_one_engine(tmp_path):
    engine, found = detect_scripts_engine(["recipes/examples/ddp_digits.py", "recipes/examples/ddp_digits.py"])
    assert engine == "torch"
    # one line, each script once
    assert detection_note(found) == ("engine torch (torchrun): recipes/examples/ddp_digits.py imports torch.distributed "
                                     "(--engine to choose another)")
    with pytest.raises(XoverError, match=r"different engines .*horovod_digits.py: horovod.*ddp_digits.py: torch"):
        detect_scripts_engine(["recipes/examples/horovod_digits.py", "recipes/examples/ddp_digits.py"])
    with pytest.raises(XoverError, match=r"--script missing.py: file not found"):
        detect_scripts_engine(["missing.py"])


def test_groups_from_scripts_detects_unless_given():
    [group] = groups_from_scripts(["recipes/examples/ddp_digits.py"], [], 1, None)
    assert [job.engine for job in group.jobs] == ["torch"]
    assert group.jobs[0].recipe.engine == "torch"  # the job records its engine (was in model_options)
    [group] = groups_from_scripts(["recipes/examples/horovod_digits.py"], [], 1, None)
    assert group.jobs[0].engine == "horovod"
    [group] = groups_from_scripts(["recipes/examples/horovod_digits.py"], [], 1, None, engine="horovod")
    assert group.jobs[0].engine == "horovod"


# ---------------------------------------------------------------------------- failure lines

TORCHRUN_ERROR = """rank 1:
Traceback (most recent call last):
  File "/tmp/x/ddp_boom.py", line 7, in <module>
    raise RuntimeError("boom")
RuntimeError: boom
[W1126 10:00:00.000 ProcessGroupGloo.cpp:123] Warning: something after it
"""


@pytest.mark.parametrize("error, reason", [
    (TORCHRUN_ERROR, "rank 1: RuntimeError: boom"),
    ("Traceback (most recent call last):\n  File \"x\", line 1\nValueError: bad value\n", "ValueError: bad value"),
    ("rank 0:\n[rank0]: Traceback (most recent call last):\n[rank0]: torch.distributed.DistBackendError: "
     "Connection closed by peer\n", "rank 0: torch.distributed.DistBackendError: Connection closed by peer"),
    ("rank 0:\nKeyError: 'x'\nsomething\nAssertionError\nlast words\n", "rank 0: AssertionError"),
    ("Error: the launcher could not start\n", "Error: the launcher could not start"),
    ("could not start: FileNotFoundError(2, 'No such file')", "could not start: FileNotFoundError(2, 'No such file')"),
    ("first line\nthe last line\n\n  \n", "the last line"),  # no exception: the last non-empty line
    ("    raise RuntimeError('boom')\n", "raise RuntimeError('boom')"),  # source is not an exception line
    ("rank 3:\n", None),
    ("", None),
    (None, None),
])
def test_the_most_telling_line_of_an_error_is_picked(error, reason):
    assert failure_reason(error) == reason


def test_a_long_reason_is_shortened():
    reason = failure_reason("ValueError: " + "x" * 1000)
    assert reason.startswith("ValueError: x") and reason.endswith("...") and len(reason) == 400


def test_one_line_for_each_job_that_did_not_finish():
    jobs = [
        {"name": "ok", "mode": "crossover", "policy": "work-conserving", "status": "finished", "error": None,
         "log_dir": "/r/1-ok-crossover"},
        {"name": "ddp_boom", "mode": "crossover", "policy": "work-conserving", "status": "failed",
         "error": TORCHRUN_ERROR, "exit_code": 1, "log_dir": "/r/2-ddp_boom-crossover"},
        {"name": "quiet", "mode": "sequential", "policy": None, "status": "failed", "error": None, "exit_code": 3,
         "log_dir": "/r/3-quiet-sequential"},
        {"name": "gone", "mode": "sequential", "policy": None, "status": "lost",
         "error": "the xover process that ran it ended without closing it (killed?)", "log_dir": "/r/4"},
        {"name": "stopped", "mode": "sequential", "policy": None, "status": "interrupted", "error": None,
         "log_dir": "/r/5"},
    ]
    assert [failure_line(job) for job in failed_jobs(jobs)] == [
        "ddp_boom (crossover, work-conserving) failed: rank 1: RuntimeError: boom  (log: /r/2-ddp_boom-crossover)",
        "quiet (sequential) failed: exit code 3, nothing on its stderr  (log: /r/3-quiet-sequential)",
        "gone (sequential) lost: the xover process that ran it ended without closing it (killed?)  (log: /r/4)",
    ]


@pytest.mark.parametrize("source, framework, evidence", [
    ("import lightning.pytorch as pl\ntrainer = pl.Trainer(strategy='ddp')", "PyTorch Lightning",
     "lightning.pytorch.Trainer"),
    ("import lightning as L\nL.Trainer()", "PyTorch Lightning", "lightning.Trainer"),
    ("import pytorch_lightning as pl\nclass M(pl.LightningModule): pass", "PyTorch Lightning", "pytorch_lightning"),
    ("from lightning.fabric import Fabric", "PyTorch Lightning", "lightning.fabric.Fabric"),
    ("from accelerate import Accelerator\naccelerator = Accelerator()", "Hugging Face Accelerate",
     "accelerate.Accelerator"),
    ("from transformers import Trainer, TrainingArguments", "the transformers Trainer", "transformers.Trainer"),
    ("import transformers\ntransformers.Seq2SeqTrainer(model)", "the transformers Trainer",
     "transformers.Seq2SeqTrainer"),
])
def test_a_script_training_with_a_framework_that_builds_ddp_is_a_torch_script_naming_it(source, framework, evidence):
    found = engine_from_source(textwrap.dedent(source), "train.py")
    assert (found.engine, found.framework, found.evidence) == ("torch", framework, evidence)
    assert f"train.py imports {evidence} ({framework}, which trains through DistributedDataParallel)" in \
        detection_note([found])


@pytest.mark.parametrize("source", [
    "from transformers import AutoConfig, BertModel",  # models alone: no Trainer, nothing distributed
    "import lightning_utilities",  # not lightning
    "import accelerated_thing",
])
def test_a_library_of_those_frameworks_that_trains_nothing_is_not_a_framework(source):
    with pytest.raises(XoverError, match=r"--script train.py: imports neither .* nor a framework .* pass --engine"):
        engine_from_source(source, "train.py")


def test_a_horovod_script_with_a_framework_is_still_both():
    with pytest.raises(XoverError, match=r"imports both horovod"):
        engine_from_source("import horovod.torch as hvd\nfrom accelerate import Accelerator", "train.py")


def test_a_refusal_guesses_the_other_engine_only_where_the_script_uses_it(monkeypatch):
    """A step on an optimizer the engine's wrapper does not drive: "or is it a Horovod script?" only where
    Horovod is imported in the rank (before: every DDP script stepping a plain optimizer, and every Horovod
    script, read a guess of the other engine that did not hold)."""
    import sys
    import types

    import torch.distributed

    from xover.engines import ENGINES

    assert not ENGINES["torch"].other_in_use() and not ENGINES["horovod"].other_in_use()
    monkeypatch.setitem(sys.modules, "horovod.torch", types.ModuleType("horovod.torch"))
    assert ENGINES["torch"].other_in_use()
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    assert ENGINES["horovod"].other_in_use()


def test_a_broken_module_of_the_script_is_named_as_its_module_not_as_the_script(tmp_path):
    (tmp_path / "helpers.py").write_text("def f(:\n")
    (tmp_path / "train.py").write_text("import torch.distributed\nimport helpers\n")
    with pytest.raises(XoverError) as refused:
        detect_engine(tmp_path / "train.py")
    assert str(refused.value).startswith(f"--script {tmp_path / 'train.py'}: its module helpers.py: line 1: not valid Python")


def test_a_packages_module_imports_absolute_names_from_the_scripts_folder_as_python_does(tmp_path):
    # `python train.py` puts train.py's folder first on sys.path: pkg/model.py's `import setup_dist` is the
    # setup_dist.py beside train.py, not one inside pkg/
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "model.py").write_text("import setup_dist\n")
    (tmp_path / "pkg" / "setup_dist.py").write_text("import horovod.torch as hvd\nhvd.init()\n")
    (tmp_path / "setup_dist.py").write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\n")
    (tmp_path / "train.py").write_text("from pkg import model\n")
    assert detect_engine(tmp_path / "train.py").engine == "torch"


def test_a_packages_relative_imports_and_its_init_are_followed_as_python_runs_them(tmp_path):
    # what `python train.py` runs: pkg/__init__.py on the way to pkg.trainer, and pkg.trainer's `from .dist
    # import setup` (pkg/dist.py); detection followed neither, so the script "imported neither" engine
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "trainer.py").write_text("from .dist import setup\n\ndef main():\n    setup()\n")
    (tmp_path / "pkg" / "dist.py").write_text(
        "import torch.distributed as dist\n\ndef setup():\n    dist.init_process_group('gloo')\n")
    (tmp_path / "train.py").write_text("from pkg.trainer import main\nmain()\n")
    assert detect_engine(tmp_path / "train.py").engine == "torch"
    (tmp_path / "pkg" / "dist.py").write_text("")
    (tmp_path / "pkg" / "__init__.py").write_text("import horovod.torch as hvd\n")  # runs before pkg.trainer
    assert detect_engine(tmp_path / "train.py").engine == "horovod"
    (tmp_path / "pkg" / "dist.py").write_text("def f(:\n")
    with pytest.raises(XoverError) as refused:
        detect_engine(tmp_path / "train.py")
    assert f"its module {Path('pkg') / 'dist.py'}: line 1: not valid Python" in str(refused.value)


def test_a_script_given_with_its_arguments_in_one_word_is_told_where_they_go(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("import torch.distributed\n")
    with pytest.raises(XoverError) as raised:
        detect_scripts_engine(["train.py --epochs 4"])
    message = str(raised.value)
    assert "--script train.py --epochs 4: file not found (train.py is, with arguments after it" in message
    assert "`--script train.py -- --epochs 4`" in message and "job file's `args`" in message
    with pytest.raises(XoverError, match=r"--script other.py --epochs 4: file not found$"):
        detect_scripts_engine(["other.py --epochs 4"])  # no such script either: nothing more to say
