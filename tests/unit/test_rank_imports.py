"""What a rank imports for xover: nothing the script does not use that costs a rank's start (each rank of every
job pays it), and a module adapted when the script imports it is adapted before the script can use it."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(program: str, cwd=None) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(program)], capture_output=True, text=True,
                            timeout=120, cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_the_ddp_shim_adapts_zero_redundancy_only_when_the_script_imports_it():
    # 2026-12-07: the shim imported torch.distributed.optim (and FSDP behind it) in every DDP rank, about 0.9
    # CPU-s of a rank's 2.4 to start, for ZeroRedundancyOptimizer that few scripts use
    out = _run("""
        import sys, types
        from xover.runtime.ddp_shim import DDPCrossover
        coordinator = types.SimpleNamespace(before_backward=[], after_backward=[], before_turn_in_forward=[])
        DDPCrossover(coordinator, None).install()
        print(sorted(name for name in ("torch.distributed.optim", "torch.distributed.fsdp") if name in sys.modules))
        from torch.distributed.optim import ZeroRedundancyOptimizer
        print(getattr(ZeroRedundancyOptimizer._sync_params, "_xover_outside_turn", False))
    """)
    assert out.split("\n")[:2] == ["[]", "True"], out


def test_a_module_already_imported_is_adapted_at_once_and_one_imported_later_before_its_importer_goes_on(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from .inner import VALUE\nSEEN = VALUE\n")
    (tmp_path / "pkg" / "inner.py").write_text("VALUE = 1\n\ndef where():\n    return 'inner'\n")
    (tmp_path / "first.py").write_text("VALUE = 1\n")
    out = _run("""
        import inspect, sys
        from xover.runtime.after_import import when_imported
        import first
        when_imported("first", lambda module: setattr(module, "VALUE", 2))
        print(first.VALUE)
        when_imported("pkg.inner", lambda module: setattr(module, "VALUE", 3))
        print("pkg" in sys.modules)
        import pkg
        print(pkg.SEEN, pkg.inner.VALUE)
        print(inspect.getsource(pkg.inner.where).split()[1])  # its source still found through the loader
        print(sum(type(finder).__name__ == "_AfterImport" for finder in sys.meta_path))
    """, cwd=tmp_path)
    assert out.split("\n")[:5] == ["2", "False", "3 3", "where():", "0"], out
