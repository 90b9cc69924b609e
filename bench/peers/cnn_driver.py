"""The convolutional benchmark's driver: examples/fashion-mnist-cnn.yaml's network
trained by traind (traind-worker --spec, one fold in one process) and by PyTorch
(bench/peers/torch_cnn.py), runs alternated, medians, ratios; then accuracy: the
refit on all 60,000 training images validated on the 10,000 t10k images by both,
and with --folds the 5-fold CV of both. Started by bench/fashion_mnist_bench.sh.

  cnn_driver.py --bin BUILD/bin --work DIR [--repeats 3] [--epochs 3] [--accuracy-epochs 10]
                [--folds] [--isa avx2] [--precision bf16] [--out FILE]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = "/usr/bin/python3"
DATA = "/usr/share/datasets/fashion-mnist"
OUT = []


def say(line=""):
    print(line, flush=True)
    OUT.append(line)


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def cpu_flags():
    wanted = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_bf16")
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                return " ".join(w for w in wanted if w in have)
    return "unknown"


def json_lines(cmd, env, timeout=3600):
    p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), p.returncode, p.stderr[-2000:]))
    return [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]


def spec(work, name, epochs, cv, precision):
    with open(os.path.join(ROOT, "examples", "fashion-mnist-cnn.yaml")) as f:
        text = f.read()
    text = text.replace("training: {epochs: 15, batch_size: 128}",
                        "training: {epochs: %d, batch_size: 128%s}" % (
                            epochs, ", precision: %s" % precision if precision else ""))
    text = text.replace("cross_validation: {folds: 5, stratified: true, shuffle: true, refit: true}", cv)
    assert "epochs: %d" % epochs in text and cv in text, "the example changed: update cnn_driver.py"
    path = os.path.join(work, name + ".yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def traind_epochs(bin_dir, spec_path, env, fold=None):
    cmd = [os.path.join(bin_dir, "traind-worker"), "--spec", spec_path]
    if fold is not None:
        cmd += ["--fold", str(fold)]
    return [o for o in json_lines(cmd, env) if "epoch" in o]


def torch_epochs(env, epochs, extra):
    return json_lines([PY, os.path.join(ROOT, "bench", "peers", "torch_cnn.py"), "--dir", DATA,
                       "--threads", "2", "--epochs", str(epochs)] + extra, env)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--accuracy-epochs", type=int, default=15)
    ap.add_argument("--folds", action="store_true", help="also the 5-fold CV of both (long)")
    ap.add_argument("--isa", default="", choices=["", "avx2"])
    ap.add_argument("--precision", default="", choices=["", "bf16"])
    ap.add_argument("--skip-accuracy", action="store_true")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    base = dict(os.environ)
    traind_env = dict(base, OMP_NUM_THREADS="2")
    torch_env = dict(base, OMP_NUM_THREADS="2")
    if a.isa == "avx2":
        traind_env["ONEDNN_MAX_CPU_ISA"] = "AVX2"
        torch_env["ATEN_CPU_CAPABILITY"] = "avx2"
        torch_env["ONEDNN_MAX_CPU_ISA"] = "AVX2"
    say("## Fashion-MNIST CNN (%s)" % time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    say()
    say("Machine: %s, %d cores; CPU flags: %s.%s traind: traind-worker --spec (fold 0 of 5: 48,000 training "
        "and 12,000 validation images), OMP_NUM_THREADS=2%s. PyTorch %s: bench/peers/torch_cnn.py, "
        "torch.set_num_threads(2), its stratified fold 0. An epoch: the training pass and the validation "
        "pass; samples/s = 48,000 / the run's median epoch (the first epoch excluded); runs alternate." % (
            cpu_model(), os.cpu_count(), cpu_flags(),
            " **Both sides capped at AVX2** (ONEDNN_MAX_CPU_ISA=AVX2; ATEN_CPU_CAPABILITY=avx2)." if a.isa else "",
            ", training.precision: " + a.precision if a.precision else "",
            subprocess.run([PY, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                           text=True).stdout.strip()))
    say()
    fold_spec = spec(a.work, "fold", a.epochs, "cross_validation: {folds: 5, stratified: true, shuffle: true}",
                     a.precision)
    runs = {"traind": [], "pytorch": []}
    for r in range(0 if a.skip_speed else a.repeats):
        t = traind_epochs(a.bin, fold_spec, traind_env, fold=0)
        runs["traind"].append(48000 / statistics.median([e["seconds"] for e in t[1:]]))
        p = torch_epochs(torch_env, a.epochs, ["--fold", "0"])
        runs["pytorch"].append(48000 / statistics.median([e["seconds"] for e in p[1:]]))
        print("run %d: traind %.0f, PyTorch %.0f samples/s" % (r + 1, runs["traind"][-1], runs["pytorch"][-1]),
              flush=True)
    if runs["traind"]:
        tm, pm = statistics.median(runs["traind"]), statistics.median(runs["pytorch"])
        say("| side | samples/s (median) | runs | traind ÷ PyTorch |")
        say("| --- | ---: | --- | ---: |")
        say("| traind%s | %.0f | %s | **%.2f×** |" % (" " + a.precision if a.precision else "", tm,
                                                    ", ".join("%.0f" % v for v in runs["traind"]), tm / pm))
        say("| PyTorch fp32 | %.0f | %s | 1.00× |" % (pm, ", ".join("%.0f" % v for v in runs["pytorch"])))
        say()
    if not a.skip_speed and os.path.exists(os.path.join(a.bin, "cpu_bench")):
        prof = json_lines([os.path.join(a.bin, "cpu_bench"), "convprofile", "--spec",
                           os.path.join(ROOT, "examples", "fashion-mnist-cnn.yaml"), "--shape", "1,28,28",
                           "--batch", "128", "--steps", "50", "--precision", a.precision or "fp32"],
                          traind_env)[0]
        say("traind's step op by op (cpu_bench convprofile, batch 128, median of 50 steps): %.2f ms a step, "
            "forward %.2f ms, backward %.2f ms, update %.2f ms. Each image layer's kernels alone on the same "
            "shapes, channels-last as the network runs them (the backward-weights pass reorders into its "
            "blocked layout):" % (
                prof["step_ms"], prof["forward_ms"], sum(prof["backward_ms_by_layer"]), prof["optimizer_ms"]))
        say()
        say("| layer | kind | forward ms | backward ms |")
        say("| ---: | --- | ---: | ---: |")
        for k in prof["kernels"]:
            say("| %d | %s | %.2f | %.2f |" % (k["layer"], k["kind"], k["forward_ms"], k["backward_ms"]))
        say()
        say("The image kernels take %.2f ms, %.0f%% of the step." % (prof["kernels_ms"],
                                                                     100 * prof["kernels_share"]))
        say()
    if not a.skip_accuracy:
        # The refit: all 60,000 images, the t10k images as validation.
        refit_spec = spec(a.work, "refit", a.accuracy_epochs,
                          "cross_validation: {validation_path: %s/t10k-images-idx3-ubyte.gz, "
                          "validation_labels_path: %s/t10k-labels-idx1-ubyte.gz}" % (DATA, DATA), a.precision)
        t = traind_epochs(a.bin, refit_spec, traind_env)
        p = torch_epochs(torch_env, a.accuracy_epochs, ["--refit"])
        ta, pa = t[-1]["val"]["accuracy"], p[-1]["val_accuracy"]
        say("Accuracy on the 10,000 t10k images after %d epochs on the 60,000 training images: traind %.4f, "
            "PyTorch %.4f (difference %+.2f points)." % (a.accuracy_epochs, ta, pa, 100 * (ta - pa)))
        say()
    if a.folds:
        cv_spec = spec(a.work, "cv", a.accuracy_epochs,
                       "cross_validation: {folds: 5, stratified: true, shuffle: true}", a.precision)
        tf = [traind_epochs(a.bin, cv_spec, traind_env, fold=k)[-1]["val"]["accuracy"] for k in range(5)]
        pf = [torch_epochs(torch_env, a.accuracy_epochs, ["--fold", str(k)])[-1]["val_accuracy"] for k in range(5)]
        say("5-fold CV, validation accuracy after %d epochs: traind %.4f ± %.4f (%s), PyTorch %.4f ± %.4f (%s)." % (
            a.accuracy_epochs, statistics.mean(tf), statistics.pstdev(tf), ", ".join("%.4f" % v for v in tf),
            statistics.mean(pf), statistics.pstdev(pf), ", ".join("%.4f" % v for v in pf)))
        say()
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(OUT) + "\n")


if __name__ == "__main__":
    main()
