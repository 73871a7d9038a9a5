"""A script profile that cannot be taken says what to change: a script that stops itself before a profile has
what it needs is told to run longer by its own arguments (xover's --iterations cannot lengthen it)."""

import subprocess
import sys
import textwrap

SHORT_SCRIPT = textwrap.dedent("""
    import argparse
    import torch, torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    steps = parser.parse_args().steps
    dist.init_process_group("gloo")
    model = DistributedDataParallel(nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
""")


def test_a_script_that_stops_itself_too_soon_to_profile_is_told_to_run_longer(isolated_results):
    script = isolated_results / "short.py"
    script.write_text(SHORT_SCRIPT)
    result = subprocess.run([sys.executable, "-m", "xover", "profile", "--script", str(script), "--np", "1",
                             "--", "--steps", "2"], capture_output=True, text=True, timeout=300, cwd=isolated_results)
    assert result.returncode == 2, result.stderr[-3000:]
    error = result.stderr[result.stderr.index("error:"):]
    assert "the script ended after 2 optimizer steps" in error and "its own arguments" in error, error
    assert "raise --iterations" not in error and "Traceback" not in result.stderr
