"""bench/peers/cnn_driver.py's specs: the example's network, with the epochs, the
split and the precision the benchmark asks for (a change to the example that the
driver's rewriting would miss fails here, not in a long benchmark run)."""
import os
import sys

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "peers"))
import cnn_driver  # noqa: E402


def test_fold_spec_is_the_example_with_the_benchmarks_epochs(tmp_path):
    path = cnn_driver.spec(str(tmp_path), "fold", 3,
                           "cross_validation: {folds: 5, stratified: true, shuffle: true}", "")
    spec = yaml.safe_load(open(path))
    example = yaml.safe_load(open(os.path.join(cnn_driver.ROOT, "examples", "fashion-mnist-cnn.yaml")))
    assert spec["training"] == {"epochs": 3, "batch_size": 128}
    assert spec["cross_validation"] == {"folds": 5, "stratified": True, "shuffle": True}
    assert spec["model"] == example["model"]
    assert spec["data"] == example["data"]
    assert spec["optimizer"] == example["optimizer"]


def test_refit_spec_validates_on_t10k_in_bf16(tmp_path):
    cv = ("cross_validation: {validation_path: /d/t10k-images-idx3-ubyte.gz, "
          "validation_labels_path: /d/t10k-labels-idx1-ubyte.gz}")
    spec = yaml.safe_load(open(cnn_driver.spec(str(tmp_path), "refit", 15, cv, "bf16")))
    assert spec["training"] == {"epochs": 15, "batch_size": 128, "precision": "bf16"}
    assert spec["cross_validation"]["validation_labels_path"] == "/d/t10k-labels-idx1-ubyte.gz"
    assert "folds" not in spec["cross_validation"]
