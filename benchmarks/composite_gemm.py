"""The GEMM scenario three ways: blocking loads, a kernel-written depth-2 pipeline, tl.composite.

Prints their end cycles side by side with the max(dma, compute) bound.

    python benchmarks/composite_gemm.py [--m 2048] [--k 256] [--n 16] [--tile 64]
"""

from __future__ import annotations

import argparse

from emulator.scenarios import gemm_blocking, gemm_composite, gemm_pipeline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=2048)
    parser.add_argument("--k", type=int, default=256)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--tile", type=int, default=64)
    args = parser.parse_args()
    shape = dict(m=args.m, k=args.k, n=args.n, tile=args.tile)
    print(
        f"C = relu(A @ B * 0.5 + bias), A {args.m}x{args.k}, B {args.k}x{args.n}, "
        f"row tiles of {args.tile}"
    )
    print(f"{'variant':<16}{'end cycle':>12}{'dma busy':>12}{'compute':>12}{'vs bound':>10}")
    for name, build in (
        ("blocking", gemm_blocking),
        ("depth-2 kernel", gemm_pipeline),
        ("tl.composite", gemm_composite),
    ):
        scenario = build(**shape)
        result = scenario.run()
        scenario.check(scenario.memory)
        busy = result.busy_cycles
        dma = sum(v for k, v in busy.items() if ".dma_read" in k)
        compute = busy["pe0.gemm"] + busy["pe0.math"]
        bound = max(dma, compute)
        print(
            f"{name:<16}{result.end_time:>12,}{dma:>12,}{compute:>12,}"
            f"{result.end_time / bound:>9.2f}x"
        )


if __name__ == "__main__":
    main()
