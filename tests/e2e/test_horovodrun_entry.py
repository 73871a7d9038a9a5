"""xover starts horovodrun through its entry point (xover/run/external/horovodrun_main.py): a real two-rank Gloo
launch, its build check kept for this installation, horovodrun's own usage errors unchanged."""

import json
import os
import subprocess
import sys
from pathlib import Path

from horovod.common.util import EXTENSIONS

from xover.run.external.horovodrun import horovodrun_command, horovodrun_launcher
from xover.run.external.horovodrun_main import CACHE_NAME, installation_key

ROOT = Path(__file__).resolve().parents[2]
HELLO = [sys.executable, "-c", "import horovod.torch as hvd; hvd.init(); print('rank', hvd.rank(), 'of', hvd.size())"]


def test_horovodrun_through_its_entry_point_launches_and_keeps_the_build_check(tmp_path):
    launcher = horovodrun_launcher()
    assert launcher == [sys.executable, "-m", "xover.run.external.horovodrun_main"]  # this Python's own horovodrun
    assert horovodrun_command(2, "localhost:2", tmp_path, tmp_path / "spec.json")[:len(launcher)] == launcher
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    for _ in range(2):  # the check made and kept, then answered from the cache
        done = subprocess.run([*launcher, "-np", "2", "-H", "localhost:2", "--gloo", *HELLO], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "rank 0 of 2" in done.stdout and "rank 1 of 2" in done.stdout, done.stdout
    kept = json.loads((tmp_path / "cache" / "xover" / CACHE_NAME).read_text())
    assert kept["installations"] == [installation_key(list(EXTENSIONS))]
    refused = subprocess.run([*launcher, "-np", "2", "--no-such-option"], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode == 2 and "usage: horovodrun" in refused.stderr, refused.stderr
