"""A script job's content, as its hash counts it (scripts.content_hash): the script and the local modules it
imports, so that an edited `model.py` beside `train.py` is another job - its profile and its stored
measurements of sharing (plan/measured.py) no longer hold - while a script that imports none of its own keeps
the hash it always had (stored profiles and measurements are keyed by it)."""

import hashlib

from xover.recipes import load_recipe
from xover.scripts import content_hash, local_modules

TRAIN = "import torch.distributed as dist\nfrom model import Net\nimport data.loader\nprint(Net, data.loader)\n"


def _project(folder):
    (folder / "train.py").write_text(TRAIN)
    (folder / "model.py").write_text("from layers import Block\nHIDDEN = 128\n")
    (folder / "layers.py").write_text("Block = object\n")
    (folder / "data").mkdir()
    (folder / "data" / "__init__.py").write_text("")
    (folder / "data" / "loader.py").write_text("from .shapes import SIZE\n")
    (folder / "data" / "shapes.py").write_text("SIZE = 8\n")
    (folder / "notes.py").write_text("unrelated = 1\n")  # imported by nothing
    (folder / "job.toml").write_text('name = "job"\nscript = "train.py"\nnp = 1\niterations = 10\n')
    return folder / "train.py"


def test_a_script_that_imports_none_of_its_own_keeps_the_hash_of_its_bytes(tmp_path):
    plain = tmp_path / "plain.py"
    plain.write_text("import torch.distributed as dist\nimport os\n")
    assert content_hash(plain) == hashlib.sha256(plain.read_bytes()).hexdigest()[:16]


def test_the_modules_a_script_imports_are_followed_through_packages_and_relative_imports(tmp_path):
    script = _project(tmp_path)
    found = {path.relative_to(tmp_path).as_posix() for path in local_modules(script)}
    assert found == {"model.py", "layers.py", "data/__init__.py", "data/loader.py", "data/shapes.py"}


def test_an_edited_local_module_is_another_job_and_an_unrelated_file_is_not(tmp_path):
    script = _project(tmp_path)
    before = load_recipe(tmp_path / "job.toml")
    (tmp_path / "notes.py").write_text("unrelated = 2\n")
    assert load_recipe(tmp_path / "job.toml").workload == before.workload
    for module in ("model.py", "layers.py", "data/shapes.py"):
        original = (tmp_path / module).read_text()
        (tmp_path / module).write_text(original + "# edited\n")
        edited = load_recipe(tmp_path / "job.toml")
        assert edited.script_sha256 != before.script_sha256, module
        assert edited.workload != before.workload and edited.hash != before.hash, module
        (tmp_path / module).write_text(original)
    assert load_recipe(tmp_path / "job.toml").workload == before.workload
    assert content_hash(script) == before.script_sha256


def test_a_module_that_does_not_parse_still_counts_by_its_bytes(tmp_path):
    script = _project(tmp_path)
    (tmp_path / "layers.py").write_text("def broken(:\n")
    before = content_hash(script)
    (tmp_path / "layers.py").write_text("def broken(:\n# edited\n")
    assert content_hash(script) != before
