"""Convolutions through the backend's lowerings (``calibration.bench_train.bench_convs``,
float32, device time per call) with cuDNN's autotuner off (the backend's setting) and on
(``torch.backends.cudnn.benchmark``), side by side in one process.

MobileViT-XXS's sealed rows missed at 16-image microbatches: one 1 x 1 convolution's
gradient (16 -> 32 channels, 128 x 128) took 2.7 ms at 16 images and 0.21 ms at 32
(``../channels_last/``). Whether the autotuner removes such outliers, and what it does to
the other kernels, decides whether the backend should turn it on.

    python grid_search/results/graph_comm/cudnn_benchmark.py [OUT.md]
"""

from __future__ import annotations

import sys

SHAPES = [  # (images, in channels, out channels, side, kernel, stride[, groups, padding])
    (16, 16, 32, 128, 1, 1), (32, 16, 32, 128, 1, 1), (64, 16, 32, 128, 1, 1),
    (16, 32, 16, 128, 1, 1), (16, 64, 64, 64, 1, 1), (16, 64, 128, 32, 1, 1),
    (16, 96, 96, 32, 3, 1), (16, 32, 32, 128, 3, 1, 32), (16, 64, 64, 64, 3, 2, 64),
    (64, 64, 64, 56, 3, 1), (64, 96, 96, 56, 7, 1, 96), (64, 128, 128, 28, 3, 1),
    (64, 256, 256, 14, 1, 1), (128, 32, 32, 112, 3, 1, 32), (64, 3, 96, 224, 4, 4, 1, 0),
]


def main(out: str | None) -> None:
    import torch

    from calibration.bench import Timer
    from calibration.bench_train import bench_convs

    device = torch.device("cuda", 0)
    timer = Timer(device, target_s=0.02, trials=3)
    times: dict[bool, list] = {}
    for on in (False, True, False):  # off again last: the order's effect, if any
        torch.backends.cudnn.benchmark = on
        times.setdefault(on, []).append(
            [r.seconds for r in bench_convs(device, ["Float32"], SHAPES, timer,
                                            lambda s: None)])
    off = [min(a, b) for a, b in zip(*times[False], strict=True)]
    on = times[True][0]
    lines = [f"# cuDNN autotuner off / on, {torch.cuda.get_device_name(device)}, "
             f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}", "",
             "| images, channels in -> out, side, kernel / stride / groups | role | off (ms) "
             "| on (ms) | off / on |", "|---|---|---|---|---|"]
    k = 0
    for sh in SHAPES:
        g = sh[6] if len(sh) > 6 else 1
        what = f"{sh[0]}, {sh[1]} -> {sh[2]}, {sh[3]}, {sh[4]} / {sh[5]} / {g}"
        for role in ("conv", "dgrad", "wgrad"):
            lines.append(f"| {what} | {role} | {off[k] * 1e3:.3f} | {on[k] * 1e3:.3f} | "
                         f"{off[k] / on[k]:.2f} |")
            k += 1
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
