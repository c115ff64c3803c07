"""Example kernels: the four fused-attention cases of ADR-0062, a flawed prefetch, a tiled GEMM."""
