"""Models are shaped by what the dataset declares, identically on every rank."""

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
