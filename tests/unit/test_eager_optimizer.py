"""The worker's optimizers without torch.compile's guards: torch's own math, bit for bit, and no
torch._dynamo import (runtime/worker.py: eager)."""

import subprocess
import sys

import pytest
import torch

from xover.runtime.worker import build_optimizer, eager

RECIPES = {
    "sgd": {"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4},
    "adam": {"optimizer": "adam", "lr": 1e-3, "weight_decay": 1e-2},
    "adamw": {"optimizer": "adamw", "lr": 1e-3, "weight_decay": 1e-2},
}
TORCH = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}


def _train(make_optimizer, steps: int = 6):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    optimizer = make_optimizer(model.parameters())
    inputs, targets = torch.randn(32, 8), torch.randint(0, 3, (32,))
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs), targets).backward()
        optimizer.step()
    return model, optimizer


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_same_parameters_and_state_as_torchs_optimizer(name):
    recipe = RECIPES[name]
    options = {k: v for k, v in recipe.items() if k != "optimizer"}
    ours, our_optimizer = _train(lambda parameters: build_optimizer(recipe, parameters))
    theirs, their_optimizer = _train(lambda parameters: TORCH[name](parameters, **options))
    assert isinstance(our_optimizer, TORCH[name])
    for a, b in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(a, b)
    # the state Horovod broadcasts and a checkpoint keeps
    ours_state, theirs_state = our_optimizer.state_dict(), their_optimizer.state_dict()
    assert ours_state["param_groups"] == theirs_state["param_groups"]
    for index, state in theirs_state["state"].items():
        for key, value in state.items():
            assert torch.equal(torch.as_tensor(ours_state["state"][index][key]), torch.as_tensor(value)), key
    our_optimizer.load_state_dict(theirs_state)


def test_no_autograd_in_the_update():
    model, optimizer = _train(lambda parameters: eager(torch.optim.SGD)(parameters, lr=0.1), steps=1)
    assert all(p.grad_fn is None and p.requires_grad for p in model.parameters())


def test_the_worker_never_imports_torch_dynamo():
    program = ("import sys, torch\n"
               "from xover.runtime.worker import build_optimizer\n"
               "model = torch.nn.Linear(4, 2)\n"
               "for recipe in ({'optimizer': 'sgd', 'lr': 0.1, 'momentum': 0.9, 'weight_decay': 0.0},\n"
               "               {'optimizer': 'adamw', 'lr': 0.1, 'weight_decay': 0.0}):\n"
               "    optimizer = build_optimizer(recipe, model.parameters())\n"
               "    optimizer.zero_grad(); model(torch.randn(3, 4)).sum().backward(); optimizer.step()\n"
               "    optimizer.load_state_dict(optimizer.state_dict())\n"
               "print('torch._dynamo' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "False"
