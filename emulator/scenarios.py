"""Built-in scenarios: a kernel with its data, grid, hardware and a numpy reference check."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emulator.config import HardwareConfig
from emulator.kernel.runner import RunResult, run_kernel
from emulator.kernels import attention, gemm
from emulator.memory import Memory
from emulator.reference import attention_reference, close, random_inputs


@dataclass
class Scenario:
    """Everything one launch needs, plus how to check its output."""

    kernel: Callable
    args: tuple
    grid: tuple[int, ...]
    memory: Memory
    config: HardwareConfig = field(default_factory=HardwareConfig)
    #: ``check(memory)`` raises AssertionError when the kernel's output is wrong.
    check: Callable[[Memory], None] | None = None
    #: ``reference(tensor name, bounds)``: what a stored block of an output should hold
    #: (an emulator.reference.BlockReference, None when it has no say); when the check
    #: fails, ``kbdebug run`` names the first block that differs and the loads that fed it.
    reference: Callable[[str, tuple[tuple[int, int], ...]], Any] | None = None
    description: str = ""
    #: The file the launch comes from: its trace's source paths are relative to that
    #: file's root (see emulator.kernel.source.launch_root). None: the kernel's file.
    #: ``kbdebug run FILE.py:FUNCTION`` sets it to FILE.py.
    launch_file: str | None = None

    def run(self, **kwargs: Any) -> RunResult:
        """Run the launch (keyword arguments go to run_kernel)."""
        if self.launch_file is not None:
            kwargs.setdefault("launch_file", self.launch_file)
        return run_kernel(self.kernel, self.args, self.grid, self.memory, self.config, **kwargs)


def _attention(
    kernel,
    description: str,
    *,
    q_rows: int,
    kv_rows: int,
    head_dim: int,
    sizes: tuple,
    grid: tuple[int, ...],
    seed: int,
    config: HardwareConfig,
) -> Scenario:
    """Random Q, K, V in HBM, room for O, and a check of O against the numpy reference.

    The kernel is called as ``kernel(tl, q_ptr, k_ptr, v_ptr, o_ptr, *sizes)``.
    K and V are written and checked block by block, never held whole outside HBM.
    """
    q, k, v = random_inputs(seed, (q_rows, head_dim), (kv_rows, head_dim), (kv_rows, head_dim))
    mem = Memory(size_bytes=q.nbytes * 2 + k.nbytes + v.nbytes + (1 << 16))
    q_ptr, k_ptr, v_ptr = q.store(mem, "Q"), k.store(mem, "K"), v.store(mem, "V")
    o_ptr = mem.alloc(q.nbytes)
    mem.name("O", o_ptr, q.shape, "f16")

    def check(memory: Memory) -> None:
        # K and V drawn again from their seed: the reference is of the inputs as given,
        # even if the kernel wrote over them.
        want = attention_reference(q.whole(), k.blocks(), v.blocks())
        got = memory.get(o_ptr, q.shape, "f16")
        close(kernel.__name__, got, want, rtol=2e-2, atol=2e-2)

    return Scenario(
        kernel=kernel,
        args=(q_ptr, k_ptr, v_ptr, o_ptr, *sizes),
        grid=grid,
        memory=mem,
        config=config,
        check=check,
        description=description,
    )


def _depth_arg(depth: int) -> tuple:
    """The kernel's trailing ``depth`` argument: none for its default, 2.

    Left out at the default so a default run records the launch arguments it
    always did, and the bundled traces stay byte-identical.
    """
    if isinstance(depth, bool) or not isinstance(depth, int):
        raise ValueError(f"depth must be a whole number of tiles, got {depth!r}")
    if depth < 1:
        raise ValueError(f"depth must be at least 1 (tiles in flight per stream), got {depth}")
    return () if depth == 2 else (depth,)


def _decode(
    kernel,
    description: str,
    n_tiles: int,
    tile: int,
    heads: int,
    head_dim: int,
    seed: int,
    config: HardwareConfig | None,
    extra: tuple = (),
) -> Scenario:
    return _attention(
        kernel,
        description,
        q_rows=heads,
        kv_rows=n_tiles * tile,
        head_dim=head_dim,
        sizes=(n_tiles, tile, heads, head_dim, *extra),
        grid=(1,),
        seed=seed,
        config=config or HardwareConfig(),
    )


def decode_blocking(
    n_tiles: int = 32,
    tile: int = 64,
    heads: int = 8,
    head_dim: int = 128,
    seed: int = 0,
    config: HardwareConfig | None = None,
) -> Scenario:
    """GQA decode attention with blocking tl.load of each K and V tile."""
    return _decode(
        attention.decode_blocking,
        decode_blocking.__doc__,
        n_tiles,
        tile,
        heads,
        head_dim,
        seed,
        config,
    )


def decode_prefetch(
    n_tiles: int = 32,
    tile: int = 64,
    heads: int = 8,
    head_dim: int = 128,
    seed: int = 0,
    config: HardwareConfig | None = None,
    depth: int = 2,
) -> Scenario:
    """GQA decode attention with a load_async pipeline for K and V, depth tiles ahead."""
    return _decode(
        attention.decode_prefetch,
        decode_prefetch.__doc__,
        n_tiles,
        tile,
        heads,
        head_dim,
        seed,
        config,
        _depth_arg(depth),
    )


def flawed_prefetch(
    n_tiles: int = 32,
    tile: int = 64,
    heads: int = 8,
    head_dim: int = 128,
    seed: int = 0,
    config: HardwareConfig | None = None,
) -> Scenario:
    """GQA decode whose "prefetch" waits on each load_async right after issuing it."""
    return _decode(
        attention.decode_flawed_prefetch,
        flawed_prefetch.__doc__,
        n_tiles,
        tile,
        heads,
        head_dim,
        seed,
        config,
    )


def prefill(
    n_tiles: int = 16,
    tile: int = 64,
    block_rows: int = 32,
    head_dim: int = 64,
    pes: int = 4,
    seed: int = 0,
    config: HardwareConfig | None = None,
    depth: int = 2,
) -> Scenario:
    """Long-context prefill: one block of query rows per PE, each with a depth-deep K/V pipeline."""
    return _attention(
        attention.prefill,
        prefill.__doc__,
        q_rows=block_rows * pes,
        kv_rows=n_tiles * tile,
        head_dim=head_dim,
        sizes=(n_tiles, tile, block_rows, head_dim, *_depth_arg(depth)),
        grid=(pes,),
        seed=seed,
        config=(config or HardwareConfig()).replace(mesh_rows=1, mesh_cols=pes),
    )


def ring_attention(
    pes: int = 4,
    block_rows: int = 32,
    kv_rows: int = 128,
    head_dim: int = 64,
    seed: int = 0,
    config: HardwareConfig | None = None,
) -> Scenario:
    """Ring attention over a ring of PEs: K/V blocks arrive over IPCQ with recv_async."""
    return _attention(
        attention.ring_attention,
        ring_attention.__doc__,
        q_rows=block_rows * pes,
        kv_rows=kv_rows * pes,
        head_dim=head_dim,
        sizes=(block_rows, kv_rows, head_dim),
        grid=(pes,),
        seed=seed,
        config=(config or HardwareConfig()).replace(mesh_rows=1, mesh_cols=pes, mesh_wrap=True),
    )


def tiled_gemm(
    m: int = 128,
    n: int = 128,
    k: int = 512,
    block_m: int = 64,
    block_k: int = 64,
    seed: int = 0,
    config: HardwareConfig | None = None,
) -> Scenario:
    """A tiled GEMM C = A @ B with blocking tile loads, one block of C's rows per PE."""
    if m % block_m or k % block_k:
        raise ValueError(
            f"m={m} and k={k} must be multiples of block_m={block_m}, block_k={block_k}"
        )
    pes = m // block_m
    config = (config or HardwareConfig()).replace(mesh_rows=1, mesh_cols=pes)
    # Row blocks of whole block_m tiles, so each lands in the tile-major layout as it is drawn.
    a, b = random_inputs(seed, (m, k), (k, n))
    a = dataclasses.replace(a, row_multiple=block_m)
    mem = Memory(size_bytes=a.nbytes + b.nbytes + m * n * 4 + (1 << 16))
    a_ptr = mem.alloc(a.nbytes)
    # Tile-major A: tile (i, kb) contiguous, kb outer (see gemm.tiled_gemm).
    tiles = mem.view(a_ptr, (k // block_k, m // block_m, block_m, block_k), "f16")
    row = 0
    for block in a.blocks():
        first, count = row // block_m, len(block) // block_m
        tiles[:, first : first + count] = block.reshape(
            count, block_m, k // block_k, block_k
        ).transpose(2, 0, 1, 3)
        row += len(block)
    # Named in its tile-major layout: a tile's load shows as A_tiles[kb, i].
    mem.name("A_tiles", a_ptr, tiles.shape, "f16")
    b_ptr = b.store(mem, "B")
    c_ptr = mem.alloc(m * n * 4)
    mem.name("C", c_ptr, (m, n), "f32")

    def check(memory: Memory) -> None:
        _check_rows(
            "tiled_gemm", memory.view(c_ptr, (m, n), "f32"), a.blocks(), b.whole(), lambda c: c
        )

    return Scenario(
        kernel=gemm.tiled_gemm,
        args=(a_ptr, b_ptr, c_ptr, m, n, k, block_m, block_k),
        grid=(pes,),
        memory=mem,
        config=config,
        check=check,
        description=tiled_gemm.__doc__,
    )


def _check_rows(name: str, got: np.ndarray, a_blocks, b: np.ndarray, epilogue) -> None:
    """Compare C = epilogue(A @ B) with ``got`` one block of A's rows at a time."""
    b = b.astype(np.float64)
    row = 0
    for block in a_blocks:
        want = epilogue(block.astype(np.float64) @ b)
        close(
            f"{name} rows {row}..{row + len(block) - 1}",
            got[row : row + len(block)],
            want,
            rtol=1e-3,
            atol=1e-2,
        )
        row += len(block)


def _gemm_epilogue(
    kernel,
    description: str,
    m: int,
    k: int,
    n: int,
    tile: int,
    seed: int,
    config: HardwareConfig | None,
    extra: tuple = (),
) -> Scenario:
    if m % tile:
        raise ValueError(f"m={m} must be a multiple of tile={tile}")
    a, b, bias = random_inputs(seed, (m, k), (k, n), (n,), dtypes=("f16", "f16", "f32"))
    scale = 0.5
    mem = Memory(size_bytes=a.nbytes + b.nbytes + bias.nbytes + m * n * 4 + (1 << 16))
    a_ptr, b_ptr, bias_ptr = a.store(mem, "A"), b.store(mem, "B"), bias.store(mem, "bias")
    c_ptr = mem.alloc(m * n * 4)
    mem.name("C", c_ptr, (m, n), "f32")

    def check(memory: Memory) -> None:
        bias_values = bias.whole().astype(np.float64)
        _check_rows(
            kernel.__name__,
            memory.view(c_ptr, (m, n), "f32"),
            a.blocks(),
            b.whole(),
            lambda c: np.maximum(c * scale + bias_values, 0),
        )

    return Scenario(
        kernel=kernel,
        args=(a_ptr, b_ptr, bias_ptr, c_ptr, m, k, n, tile, scale, *extra),
        grid=(1,),
        memory=mem,
        config=config or HardwareConfig(),
        check=check,
        description=description,
    )


def gemm_blocking(
    m: int = 2048,
    k: int = 256,
    n: int = 16,
    tile: int = 64,
    seed: int = 0,
    config: HardwareConfig | None = None,
) -> Scenario:
    """C = relu(A @ B * 0.5 + bias) over row tiles of A, each loaded with a blocking tl.load."""
    return _gemm_epilogue(
        gemm.gemm_epilogue_blocking, gemm_blocking.__doc__, m, k, n, tile, seed, config
    )


def gemm_pipeline(
    m: int = 2048,
    k: int = 256,
    n: int = 16,
    tile: int = 64,
    seed: int = 0,
    config: HardwareConfig | None = None,
    depth: int = 2,
) -> Scenario:
    """The same GEMM with a kernel-written load_async pipeline (TilePipeline), depth tiles ahead."""
    return _gemm_epilogue(
        gemm.gemm_epilogue_pipeline,
        gemm_pipeline.__doc__,
        m,
        k,
        n,
        tile,
        seed,
        config,
        _depth_arg(depth),
    )


def gemm_composite(
    m: int = 2048,
    k: int = 256,
    n: int = 16,
    tile: int = 64,
    seed: int = 0,
    config: HardwareConfig | None = None,
) -> Scenario:
    """The same GEMM as one tl.composite, pipelined by the PE's scheduler."""
    return _gemm_epilogue(
        gemm.gemm_epilogue_composite, gemm_composite.__doc__, m, k, n, tile, seed, config
    )


#: Built-in scenarios by the name `kbdebug run` takes.
SCENARIOS: dict[str, Callable[..., Scenario]] = {
    "decode_blocking": decode_blocking,
    "decode_prefetch": decode_prefetch,
    "flawed_prefetch": flawed_prefetch,
    "prefill": prefill,
    "ring_attention": ring_attention,
    "tiled_gemm": tiled_gemm,
    "gemm_blocking": gemm_blocking,
    "gemm_pipeline": gemm_pipeline,
    "gemm_composite": gemm_composite,
}


def parameters(name: str) -> dict[str, Any]:
    """The settable parameters of a built-in scenario and their defaults."""
    sig = inspect.signature(SCENARIOS[name])
    return {p.name: p.default for p in sig.parameters.values() if p.name != "config"}
