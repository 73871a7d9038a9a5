"""Models are shaped by what the dataset declares, identically on every rank."""

import re

import pytest
import torch

from xover import workloads


def _model(model, dataset, rank, options, model_options=None):
    data = workloads.build_dataset(dataset, batch_size=4, rank=rank, world_size=2, seed=3, options=options)
    return data, workloads.build_model(model, data, model_options or {})


def test_every_rank_builds_the_same_head_whatever_labels_it_samples():
    # 100 classes but 4 samples per rank: the labels a rank sees say nothing of the class count
    heads = [_model("mlp", "synthetic-images", rank, {"image_size": 8, "num_classes": 100})[1].body[-1].out_features
             for rank in (0, 1)]
    assert heads == [100, 100]
    resnet = _model("resnet", "synthetic-images", 0, {"image_size": 8, "num_classes": 37})[1]
    assert resnet.head.out_features == 37


def test_the_transformer_takes_the_dataset_vocabulary():
    data, model = _model("transformer", "synthetic-tokens", 0, {"seq_len": 8, "vocab_size": 1000},
                         {"d_model": 16, "heads": 2, "layers": 1})
    inputs, _ = data.batch(0)
    assert int(inputs.max()) >= 256  # tokens beyond a byte vocabulary
    assert model(inputs).shape[-1] == 1000
    assert model.token.num_embeddings == 1000


def test_real_datasets_declare_their_sizes():
    digits = workloads.build_dataset("digits", batch_size=4, rank=0, world_size=1, seed=0, options={})
    chars = workloads.build_dataset("python-chars", batch_size=4, rank=0, world_size=1, seed=0, options={"seq_len": 8})
    assert digits.classes == 10 and chars.vocab == 256
    assert isinstance(chars.batch(0)[0], torch.Tensor)


# The paper-class models: the originals' parameter counts, and one small step of each on a CPU.

def _parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())  # a tied weight counts once


def _full_size(model, dataset, options, model_options=None):
    data = workloads.build_dataset(dataset, batch_size=1, rank=0, world_size=1, seed=0, options=options)
    with torch.device("meta"):  # shapes only: no memory, no initialisation time
        return workloads.build_model(model, data, model_options or {})


def test_paper_models_have_the_originals_parameter_counts():
    images = {"image_size": 224, "num_classes": 1000}
    assert _parameters(_full_size("resnet50", "synthetic-images", images)) == 25_557_032  # torchvision's
    assert _parameters(_full_size("vgg16", "synthetic-images", images)) == 138_357_544  # torchvision's
    # BERT-base with its masked-LM head, decoder tied to the word embeddings, no pooler: the count of
    # transformers' BertForMaskedLM(BertConfig())
    bert = _parameters(_full_size("bert", "synthetic-tokens", {"seq_len": 128, "vocab_size": 30522}))
    assert bert == 109_514_298 and 108e6 < bert < 112e6


def _step(model, dataset, options, model_options=None):
    """One forward and backward pass on a batch of 2; every parameter must get a gradient."""
    torch.manual_seed(0)
    data = workloads.build_dataset(dataset, batch_size=2, rank=0, world_size=1, seed=3, options=options)
    net = workloads.build_model(model, data, model_options or {})
    inputs, targets = data.batch(0)
    outputs = net(inputs)
    loss = torch.nn.functional.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))
    loss.backward()
    missing = [name for name, p in net.named_parameters() if p.grad is None]
    assert not missing, missing
    return outputs, loss


def test_resnet50_trains_a_step_on_small_images():
    outputs, _ = _step("resnet50", "synthetic-images", {"image_size": 64, "num_classes": 10})
    assert outputs.shape == (2, 10)


def test_vgg16_trains_a_step_and_sizes_its_classifier_by_the_image():
    outputs, _ = _step("vgg16", "synthetic-images", {"image_size": 32, "num_classes": 10})
    assert outputs.shape == (2, 10)
    assert _full_size("vgg16", "synthetic-images", {"image_size": 64}).classifier[0].in_features == 512 * 2 * 2
    with pytest.raises(ValueError, match="at least 32x32"):
        _full_size("vgg16", "synthetic-images", {"image_size": 16})


SMALL_BERT = {"layers": 2, "d_model": 64, "heads": 4, "ffn": 128}


def test_bert_trains_a_step_with_its_decoder_tied_to_the_word_embeddings():
    outputs, _ = _step("bert", "synthetic-tokens", {"seq_len": 16, "vocab_size": 100}, SMALL_BERT)
    assert outputs.shape == (2, 16, 100)
    net = _full_size("bert", "synthetic-tokens", {"seq_len": 16, "vocab_size": 100}, SMALL_BERT)
    # the decoder reuses the word embeddings: only its bias is a parameter of its own
    assert [name for name, p in net.named_parameters() if p.shape == (100, 64)] == ["word.weight"]
    assert net.decoder_bias.shape == (100,)


def _bert_losses(steps: int) -> list[float]:
    torch.manual_seed(11)
    data = workloads.build_dataset("synthetic-tokens", batch_size=2, rank=0, world_size=1, seed=11,
                                   options={"seq_len": 16, "vocab_size": 100})
    net = workloads.build_model("bert", data, SMALL_BERT)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    inputs, targets = data.batch(0)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(inputs).reshape(-1, 100), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_bert_is_deterministic_for_a_seed():
    # the same seed builds the same weights, and the explicit attention computes the same losses, bit for bit
    first = _bert_losses(3)
    assert first == _bert_losses(3) and first[-1] < first[0]


def test_bert_refuses_sequences_longer_than_its_positions():
    with pytest.raises(ValueError, match="max_positions"):
        _full_size("bert", "synthetic-tokens", {"seq_len": 16, "vocab_size": 100}, {**SMALL_BERT, "max_positions": 8})


def test_the_paper_recipes_load():
    from xover.recipes import load_recipe

    shapes = {(r.model, r.dataset, r.batch_size, r.optimizer, r.iterations, r.np, r.seed)
              for r in map(load_recipe, ("resnet50-synthetic", "vgg16-synthetic", "bert-base-tokens"))}
    assert shapes == {("resnet50", "synthetic-images", 64, "sgd", 60, 2, 5),
                      ("vgg16", "synthetic-images", 32, "sgd", 30, 2, 7),
                      ("bert", "synthetic-tokens", 32, "adamw", 40, 2, 11)}


@pytest.mark.parametrize("change, field, words", [
    ({"model_options": {"heads": 5}}, "model_options.heads", "must divide d_model (768)"),
    ({"model_options": {"d_model": 64, "heads": 3}}, "model_options.heads", "must divide d_model (64)"),
    ({"model_options": {"max_positions": 64}}, "dataset_options.seq_len", "at most model_options.max_positions (64)"),
    ({"model": "vgg16", "dataset": "synthetic-images", "dataset_options": {"image_size": 16}},
     "dataset_options.image_size", "at least 32"),
])
def test_paper_recipes_are_checked_before_a_worker_builds_them(change, field, words):
    from xover.recipes import RecipeError, parse_recipe

    recipe = {"name": "b", "model": "bert", "dataset": "synthetic-tokens", "batch_size": 2, "optimizer": "adamw",
              "lr": 1e-4, "np": 2, "seed": 1, "iterations": 3, "dataset_options": {"seq_len": 128}}
    with pytest.raises(RecipeError, match=f"field '{re.escape(field)}': .*{re.escape(words)}"):
        parse_recipe({**recipe, **change}, "b.toml")


@pytest.mark.parametrize("recipe, field, words", [
    # a step's batch on every rank beyond the train split: ranks trained on fewer rows than a step counted (1500
    # of digits' rows counted as 2048, 5000 as 5000) and a rank on none (the probe's F10 and F9, 2026-12-07)
    ({"dataset": "digits", "batch_size": 1024}, "batch_size", "2048 rows a step, and the train split of digits has 1500"),
    ({"dataset": "digits", "batch_size": 751}, "batch_size", "make it at most 750"),
    ({"model": "transformer", "dataset": "python-chars", "dataset_options": {"seq_len": 50000, "max_bytes": 20000}},
     "dataset_options.seq_len", "leaves no training sequence"),
    ({"model": "transformer", "dataset": "python-chars", "dataset_options": {"max_bytes": 9999}},
     "dataset_options.max_bytes", "must be at least 10000"),  # said as the standard library missing, at run time
])
def test_a_batch_the_train_split_cannot_fill_is_refused_when_the_recipe_is_read(recipe, field, words):
    from xover.recipes import RecipeError, parse_recipe

    base = {"name": "b", "model": "mlp", "dataset": "digits", "batch_size": 32, "optimizer": "sgd", "lr": 0.1,
            "np": 2, "seed": 1, "iterations": 3}
    with pytest.raises(RecipeError, match=f"field '{re.escape(field)}': .*{re.escape(words)}"):
        parse_recipe({**base, **recipe}, "b.toml")
    assert parse_recipe({**base, "batch_size": 750}, "b.toml").batch_size == 750  # 1500 rows on two ranks: whole


def test_the_python_chars_split_is_what_recipes_are_checked_against():
    from xover.workloads.datasets import python_chars

    data = python_chars(batch_size=2, rank=0, world_size=1, seed=1, seq_len=64, max_bytes=20000)
    assert len(data.train.inputs) == workloads.train_rows("python-chars", {"seq_len": 64, "max_bytes": 20000}) == 280
    assert len(data.test.inputs) == 32  # (20000 - 1) // 64 = 312 windows, 90% of them to train on


def test_the_digits_are_scikit_learns_without_importing_it():
    import subprocess
    import sys

    import numpy as np
    from sklearn.datasets import load_digits

    from xover.workloads.datasets import digits_arrays

    images, labels = digits_arrays()
    bunch = load_digits()
    assert np.array_equal(images, bunch.images) and images.dtype == bunch.images.dtype
    assert np.array_equal(labels, bunch.target)
    # a rank's start: the digits come without scikit-learn (and SciPy behind it)
    probe = "import sys; from xover.workloads.datasets import digits_arrays; digits_arrays(); print('sklearn' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip() == "False"
