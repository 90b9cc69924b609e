"""cpu_bench's modes on small models: what bench/run_cpu_bench.sh reads from them.

The GEMM set is checked against hand-derived flop counts and the CPU backend's
layout rule (a layer with more than 32,768 weights and 16 rows of w per thread
is cut in row slabs; TRAIND_CPU_GEMM=openblas gives every forward and input
gradient to OpenBLAS), and fit's --gemmset-sets against its epochs; fit trains
to the same loss with its SGD update in the backward pass or after it. Speeds are
not asserted: they belong to the benchmark, not to a test.
"""
import json
import os
import struct
import subprocess

import pytest

BIN = os.environ["TRAIND_BIN_DIR"]
OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0"


def cpu_bench(*args, **env):
    e = dict(os.environ, OMP_NUM_THREADS="2")
    e.pop("TRAIND_CPU_GEMM", None)
    e.update(env)
    p = subprocess.run([os.path.join(BIN, "cpu_bench")] + [str(a) for a in args], env=e,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    assert len(lines) == 1, p.stdout
    return json.loads(lines[0])


def write_data(path, rows, features, classes):
    """The benchmark's data file: "TRDB", rows, features, classes, x (f32), y (s32)."""
    with open(path, "wb") as f:
        f.write(b"TRDB" + struct.pack("<3q", rows, features, classes))
        f.write(struct.pack("<%df" % (rows * features),
                            *[((i * 37) % 101) / 101.0 - 0.5 for i in range(rows * features)]))
        f.write(struct.pack("<%di" % rows, *[i % classes for i in range(rows)]))


# 20-300-200-3, batch 64: layer 1 (300×200 = 60,000 weights, 150 rows a
# thread) is cut in slabs at 2 threads; layers 0 (6,000) and 2 (600) are not.
SHAPE = ["--features", 20, "--hidden", "300,200", "--classes", 3, "--batch", 64]
FLOPS = 2 * 64 * (2 * 20 * 300 + 3 * 300 * 200 + 3 * 200 * 3)  # no input gradient for layer 0
PRODUCTS = {"0.forward", "0.weights", "1.forward", "1.weights", "1.data", "2.forward",
            "2.weights", "2.data"}


def test_gemmset_makes_the_backends_calls():
    r = cpu_bench("gemmset", *SHAPE, "--reps", 5, TRAIND_CPU_GEMM="onednn")
    assert r["set_mflop"] == pytest.approx(FLOPS / 1e6, abs=1e-3)
    assert r["gemms"] == 8 and r["sets"] == 5 and r["threads"] == 2
    assert r["slab_gemms"] == 3 and r["openblas_gemms"] == 0
    assert set(r["products_ms"]) == PRODUCTS
    assert all(ms > 0 for ms in r["products_ms"].values())
    # Best, median and sustained describe the same sets.
    assert r["best_gflops"] >= r["median_gflops"] > 0
    assert r["best_gflops"] >= r["sustained_gflops"] > 0


@pytest.mark.skipif(not os.path.exists(OPENBLAS), reason="libopenblas0-openmp is not installed")
def test_gemmset_follows_traind_cpu_gemm():
    r = cpu_bench("gemmset", *SHAPE, "--reps", 3, TRAIND_CPU_GEMM="openblas")
    # Every layer in the slab kernel; its forward and input gradients in OpenBLAS.
    assert r["slab_gemms"] == 8 and r["openblas_gemms"] == 5
    assert set(r["products_ms"]) == PRODUCTS


def test_gemmset_accumulates_the_weight_gradients_with_fits_momentum():
    default = cpu_bench("gemmset", *SHAPE, "--reps", 2, TRAIND_CPU_GEMM="onednn")
    plain = cpu_bench("gemmset", *SHAPE, "--reps", 2, "--momentum", 0, TRAIND_CPU_GEMM="onednn")
    assert default["momentum"] == pytest.approx(0.9) and plain["momentum"] == 0
    # The same products and flops either way: the sum is not counted.
    assert default["set_mflop"] == plain["set_mflop"]
    assert set(default["products_ms"]) == set(plain["products_ms"]) == PRODUCTS


def test_gemmset_rejects_a_bad_policy():
    p = subprocess.run([os.path.join(BIN, "cpu_bench"), "gemmset"] + [str(a) for a in SHAPE],
                       env=dict(os.environ, TRAIND_CPU_GEMM="fastest"), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2
    assert "TRAIND_CPU_GEMM" in p.stderr and "fastest" in p.stderr


def test_fit_runs_the_set_after_each_epoch(tmp_path):
    data = tmp_path / "d.bin"
    write_data(data, 96, 20, 3)
    r = cpu_bench("fit", "--data", data, "--hidden", "300,200", "--batch", 64, "--epochs", 3,
                  "--gemmset-sets", 2)
    assert len(r["epoch_seconds"]) == 3
    assert r["gemmset_sets"] == 2
    assert r["set_mflop"] == pytest.approx(FLOPS / 1e6, abs=1e-3)
    assert len(r["gemmset_gflops_after_epoch"]) == 3
    assert all(g > 0 for g in r["gemmset_gflops_after_epoch"])


def test_fit_updates_in_the_backward_pass_or_not_to_the_same_loss(tmp_path):
    data = tmp_path / "d.bin"
    write_data(data, 192, 20, 3)
    a = cpu_bench("fit", "--data", data, "--hidden", "300,200", "--batch", 64, "--epochs", 3)
    b = cpu_bench("fit", "--data", data, "--hidden", "300,200", "--batch", 64, "--epochs", 3,
                  "--update-in-backward", 0)
    assert a["epoch_loss"] == pytest.approx(b["epoch_loss"], rel=1e-4)
    assert a["epoch_loss"][-1] < a["epoch_loss"][0]


def test_fit_without_the_set_prints_none(tmp_path):
    data = tmp_path / "d.bin"
    write_data(data, 96, 20, 3)
    r = cpu_bench("fit", "--data", data, "--hidden", "16", "--batch", 32, "--epochs", 2)
    assert len(r["epoch_seconds"]) == 2
    assert "gemmset_gflops_after_epoch" not in r


def test_profile_times_every_part(tmp_path):
    data = tmp_path / "d.bin"
    write_data(data, 256, 20, 3)
    r = cpu_bench("profile", "--data", data, "--hidden", "300,200", "--batch", 64, "--steps", 5)
    assert r["steps"] == 5 and len(r["backward_ms_by_layer"]) == 3
    for key in ("step_ms", "forward_ms", "optimizer_ms", "gather_ms", "loss_ms"):
        assert r[key] > 0, key
    r = cpu_bench("profile", "--data", data, "--hidden", "300,200", "--batch", 64, "--steps", 5,
                  "--update-in-backward", 0)
    assert r["steps"] == 5 and r["optimizer_ms"] > 0
    assert "interleaved" not in r


def test_profile_interleaves_whole_steps_with_sets(tmp_path):
    data = tmp_path / "d.bin"
    write_data(data, 256, 20, 3)
    r = cpu_bench("profile", "--data", data, "--hidden", "300,200", "--batch", 64, "--steps", 2,
                  "--interleave-rounds", 3, "--interleave-block", 2)
    i = r["interleaved"]
    assert i["rounds"] == 3 and i["block"] == 2
    assert 0 < i["share_p25"] <= i["share_median"] <= i["share_p75"]
    assert i["step_ms"] > 0 and i["set_ms"] > 0
    p = subprocess.run([os.path.join(BIN, "cpu_bench"), "profile", "--data", str(data), "--hidden", "300,200",
                        "--batch", "64", "--interleave-rounds", "3", "--interleave-block", "0"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert "--interleave-block must be at least 1" in p.stderr
