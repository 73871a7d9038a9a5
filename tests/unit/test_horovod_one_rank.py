"""The parameters a Horovod optimizer updates, as the script shim reads them: from the optimizer's groups, which
hold them at any size (Horovod's own list is empty with one rank; tests/e2e/test_scripts.py runs it there)."""

import torch

from xover.runtime.script_shim import _parameters_to_update


def test_the_parameters_to_update_are_the_groups_trainable_ones_in_order():
    body, head = torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)
    frozen = torch.nn.Parameter(torch.zeros(5), requires_grad=False)
    optimizer = torch.optim.SGD([{"params": [*body.parameters(), frozen]}, {"params": head.parameters(), "lr": 0.1}],
                                lr=0.01)
    trainable = [*body.parameters(), *head.parameters()]
    assert [id(p) for p in _parameters_to_update(optimizer)] == [id(p) for p in trainable]
