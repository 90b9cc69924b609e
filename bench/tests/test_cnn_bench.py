"""bench/peers/cnn_driver.py's specs: the example's network, with the epochs, the
split and the precision the benchmark asks for (a change to the example that the
driver's rewriting would miss fails here, not in a long benchmark run)."""
import json
import os
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "peers"))
import cnn_driver  # noqa: E402

BIN = os.environ.get("TRAIND_BIN_DIR", "")


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


def test_convprofile_times_the_step_and_each_image_kernel(tmp_path):
    """cpu_bench convprofile on a small CNN: every layer's backward pass, each
    conv and pooling layer's kernels alone, and their share of the step."""
    spec = tmp_path / "cnn.yaml"
    spec.write_text("""
data: {path: x.idx, shape: [2, 10, 10]}
model:
  layers:
    - conv2d: {filters: 4, kernel: 3, activation: relu}
    - max_pool2d: {kernel: 2}
    - conv2d: {filters: 6, kernel: 3, padding: same, activation: gelu}
    - avg_pool2d: {kernel: 2}
    - flatten: {}
    - dense: {units: 3}
loss: {softmax_cross_entropy: {}}
optimizer: {adam: {learning_rate: 0.001}}
training: {epochs: 1, batch_size: 16}
""")
    p = subprocess.run([os.path.join(BIN, "cpu_bench"), "convprofile", "--spec", str(spec),
                        "--batch", "16", "--steps", "3"], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, OMP_NUM_THREADS="2"))
    assert p.returncode == 0, p.stderr
    r = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][0])
    assert r["batch"] == 16 and r["steps"] == 3 and len(r["backward_ms_by_layer"]) == 6
    assert [(k["layer"], k["kind"]) for k in r["kernels"]] == [
        (0, "conv2d"), (1, "max_pool2d"), (2, "conv2d"), (3, "avg_pool2d")]
    assert all(k["forward_ms"] > 0 and k["backward_ms"] > 0 for k in r["kernels"])
    assert abs(r["kernels_ms"] - sum(k["forward_ms"] + k["backward_ms"] for k in r["kernels"])) < 1e-3
    assert abs(r["kernels_share"] - r["kernels_ms"] / r["step_ms"]) < 1e-3
    # No shape: refused, naming what to give.
    spec.write_text(spec.read_text().replace(", shape: [2, 10, 10]", ""))
    p = subprocess.run([os.path.join(BIN, "cpu_bench"), "convprofile", "--spec", str(spec)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--shape C,H,W" in p.stderr
