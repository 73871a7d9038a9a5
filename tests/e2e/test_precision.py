"""A recipe's precision and memory format (bf16 autocast, channels-last): the job trains so, and its
losses under crossover are still those of the job alone, at every iteration."""

import json
import subprocess
import sys

import tomllib

from xover.recipes import BUILTIN_RECIPES

XOVER = [sys.executable, "-m", "xover"]


def _xover(*args, timeout=600):
    return subprocess.run([*XOVER, *args], capture_output=True, text=True, timeout=timeout)


def test_bf16_channels_last_keeps_exact_parity_under_crossover(isolated_results, tmp_path):
    fields = tomllib.loads((BUILTIN_RECIPES / "resnet-digits.toml").read_text())
    lines = ['name = "resnet-digits-bf16"', 'precision = "bf16"', "channels_last = true"]
    for key, value in fields.items():
        if key not in ("name", "model_options", "dataset_options"):
            lines.append(f"{key} = {json.dumps(value)}")
    lines += ["[model_options]", "width = 16", "[dataset_options]", "image_size = 16"]
    recipe = tmp_path / "resnet-digits-bf16.toml"
    recipe.write_text("\n".join(lines) + "\n")

    # beside resnet-digits itself in fp32: its sequential run is the fp32 losses compared with below (before, a run
    # of its own, beside mlp-digits as the partner)
    ran = _xover("run", "--group", str(recipe), "resnet-digits", "--mode", "sequential,crossover", "--policy",
                 "work-conserving", "--iterations", "6", "--json")
    assert ran.returncode == 0, ran.stderr[-3000:]
    jobs = json.loads(ran.stdout)["jobs"]
    assert {(j["name"], j["mode"], j["status"]) for j in jobs} == {
        (name, mode, "finished") for name in ("resnet-digits-bf16", "resnet-digits")
        for mode in ("sequential", "crossover")}
    report = _xover("report", json.loads(ran.stdout)["experiment"], "--format", "json")
    parity = {(p["name"], p["mode"]): (p["steps"], p["identical"]) for p in json.loads(report.stdout)["parity"]}
    assert parity[("resnet-digits-bf16", "crossover")] == (6, True), parity
    # bf16 changes the arithmetic: its losses are not those of the same model in fp32
    losses = {j["name"]: j["final_loss"] for j in jobs if j["mode"] == "sequential"}
    assert losses["resnet-digits"] != losses["resnet-digits-bf16"], losses


def test_a_bad_precision_is_one_line_naming_it(tmp_path):
    recipe = tmp_path / "bad.toml"
    recipe.write_text('precision = "fp8"\n' + (BUILTIN_RECIPES / "mlp-digits.toml").read_text())
    refused = _xover("train", str(recipe))
    assert refused.returncode == 2 and "field 'precision': unknown precision 'fp8'" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    recipe.write_text("channels_last = 1\n" + (BUILTIN_RECIPES / "mlp-digits.toml").read_text())
    refused = _xover("train", str(recipe))
    assert refused.returncode == 2 and "field 'channels_last': must be true or false" in refused.stderr, refused.stderr
    text = (BUILTIN_RECIPES / "transformer-tokens.toml").read_text()
    recipe.write_text("channels_last = true\n" + text)
    refused = _xover("train", str(recipe))
    assert refused.returncode == 2 and "field 'channels_last': applies to image models" in refused.stderr
