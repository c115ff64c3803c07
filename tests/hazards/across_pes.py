"""Hazards across PEs, and their race-free twins: one PE's access to HBM bytes another PE stores.

Two accesses on different PEs are ordered only by the chain: the first access waited on its
PE, then a tl.send issued after that wait, and the receiving PE waiting that receive before
it issues the second access (through as many PEs as the messages go).
"""

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

ROWS, COLS = 8, 16  # one f32 tile: 512 bytes, 11 cycles on a DMA channel
ROW = COLS * 4
TILE = ROWS * ROW
TOKEN = (1, COLS)  # a 64-byte "your data is ready" message


def _mesh(kernel, args, mem, check, n_pes=2):
    """One program per PE of a 1 x n_pes mesh."""
    config = HardwareConfig(mesh_rows=1, mesh_cols=n_pes)
    return Scenario(kernel=kernel, args=args, grid=(n_pes,), memory=mem, config=config, check=check)


def _expect(memory, ptr, want):
    got = memory.get(ptr, want.shape, np.float32)
    np.testing.assert_allclose(got, want)


def _token(tl):
    return tl.full(TOKEN, 1.0, "f32")


def _settle(tl):
    """About 130 cycles of GEMM, so the other PE's access is issued first."""
    a = tl.full((32, 32), 1.0, "f32")
    return tl.dot(a, a)


def _busy(tl):
    """About 1,000 cycles of GEMM: longer than a store takes to land at the default latency."""
    a = tl.full((64, 64), 1.0, "f32")
    return tl.dot(a, a)


def _two_tiles_out(mem):
    buf, out = mem.alloc(TILE), mem.alloc(TILE)
    return buf, out, (lambda m: _expect(m, out, np.full((ROWS, COLS), 6.0)))


# ================================ hazards ==================================================


def k_unsignalled(tl, buf, out):
    if tl.program_id(0) == 0:
        # waited, but PE 1 is never told
        tl.wait(tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32")))  # @x1.S
    else:
        _settle(tl)
        y = tl.wait(tl.load_async(buf, (ROWS, COLS), "f32"))  # @x1.L
        tl.wait(tl.store(out, y * 3.0))


def hazard_xpe_raw_unsignalled():
    mem = Memory(size_bytes=1 << 16)
    buf, out, check = _two_tiles_out(mem)
    return _mesh(k_unsignalled, (buf, out), mem, check)


def k_send_before_wait(tl, buf, out):
    if tl.program_id(0) == 0:
        h = tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32"))  # @x2.S
        tl.wait(tl.send("right", _token(tl)))  # sent before the store is waited
        tl.wait(h)
    else:
        tl.wait(tl.recv_async("left", TOKEN, "f32"))
        y = tl.wait(tl.load_async(buf, (ROWS, COLS), "f32"))  # @x2.L
        tl.wait(tl.store(out, y * 3.0))


def hazard_xpe_raw_send_before_store_wait():
    mem = Memory(size_bytes=1 << 16)
    buf, out, check = _two_tiles_out(mem)
    return _mesh(k_send_before_wait, (buf, out), mem, check)


def k_load_before_recv_wait(tl, buf, out):
    if tl.program_id(0) == 0:
        tl.wait(tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32")))  # @x3.S
        tl.wait(tl.send("right", _token(tl)))
    else:
        _settle(tl)
        r = tl.recv_async("left", TOKEN, "f32")
        f = tl.load_async(buf, (ROWS, COLS), "f32")  # @x3.L  issued before the receive is waited
        tl.wait(r)
        tl.wait(tl.store(out, tl.wait(f) * 3.0))


def hazard_xpe_raw_load_before_recv_wait():
    mem = Memory(size_bytes=1 << 16)
    buf, out, check = _two_tiles_out(mem)
    return _mesh(k_load_before_recv_wait, (buf, out), mem, check)


def k_hidden_by_compute(tl, buf, out):
    if tl.program_id(0) == 0:
        h = tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32"))  # @x4.S
        _busy(tl)
        tl.wait(tl.send("right", _token(tl)))  # the store has landed by now, but is not waited
        tl.wait(h)
    else:
        tl.wait(tl.recv_async("left", TOKEN, "f32"))
        y = tl.wait(tl.load_async(buf, (ROWS, COLS), "f32"))  # @x4.L
        tl.wait(tl.store(out, y * 3.0))


def hazard_xpe_raw_hidden_by_compute():
    mem = Memory(size_bytes=1 << 16)
    buf, out, check = _two_tiles_out(mem)
    return _mesh(k_hidden_by_compute, (buf, out), mem, check)


def _publish_unwaited(tl, ptr, x):
    h = tl.store(ptr, x)  # @x5.S
    tl.send("right", _token(tl))
    return h


def _consume(tl, ptr):
    tl.wait(tl.recv_async("left", TOKEN, "f32"))
    return tl.wait(tl.load_async(ptr, (ROWS, COLS), "f32"))  # @x5.L


def k_pipeline_unwaited(tl, x_ptr, buf, out, n):
    if tl.program_id(0) == 0:
        handles = []
        for j in range(n):
            x = tl.wait(tl.load_async(x_ptr + j * TILE, (ROWS, COLS), "f32"))
            handles.append(_publish_unwaited(tl, buf + j * TILE, x * 2.0))
        for h in handles:
            tl.wait(h)
    else:
        for j in range(n):
            tl.wait(tl.store(out + j * TILE, _consume(tl, buf + j * TILE) + 1.0))


def _pipeline(kernel, n):
    mem = Memory(size_bytes=1 << 16)
    xs = np.arange(n * ROWS * COLS, dtype=np.float32).reshape(n * ROWS, COLS)
    x_ptr, buf, out = mem.put(xs), mem.alloc(n * TILE), mem.alloc(n * TILE)
    return _mesh(kernel, (x_ptr, buf, out, n), mem, lambda m: _expect(m, out, xs * 2.0 + 1.0))


def hazard_xpe_raw_pipeline_loop(n=3):
    return _pipeline(k_pipeline_unwaited, n)


def k_war_token_early(tl, buf, out):
    if tl.program_id(0) == 1:
        f = tl.load_async(buf, (ROWS, COLS), "f32")  # @x6.L
        tl.wait(tl.send("left", _token(tl)))  # "done with buf", before the load is waited
        tl.wait(tl.store(out, tl.wait(f) * 2.0))
    else:
        tl.wait(tl.recv_async("right", TOKEN, "f32"))
        tl.wait(tl.store(buf, tl.full((ROWS, COLS), 7.0, "f32")))  # @x6.S


def _war_scenario(kernel):
    mem = Memory(size_bytes=1 << 16)
    buf = mem.put(np.ones((ROWS, COLS), np.float32))
    out = mem.alloc(TILE)

    def check(m):
        _expect(m, out, np.full((ROWS, COLS), 2.0))
        _expect(m, buf, np.full((ROWS, COLS), 7.0))

    return _mesh(kernel, (buf, out), mem, check)


def hazard_xpe_war_token_before_load_wait():
    return _war_scenario(k_war_token_early)


def k_waw_unordered(tl, buf):
    if tl.program_id(0) == 0:
        tl.wait(tl.store(buf, tl.full((16 * ROWS, COLS), 1.0, "f32")))  # @x7.S1  the background
    else:
        _settle(tl)
        # a patch meant to land on top of PE 0's background
        tl.wait(tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32")))  # @x7.S2


def _waw_scenario(kernel):
    mem = Memory(size_bytes=1 << 16)
    buf = mem.alloc(16 * TILE)
    want = np.ones((16 * ROWS, COLS), np.float32)
    want[:ROWS] = 2.0
    return _mesh(kernel, (buf,), mem, lambda m: _expect(m, buf, want))


def hazard_xpe_waw_unordered():
    return _waw_scenario(k_waw_unordered)


def k_halo_tiles(tl, x_ptr, out, n):
    pe = tl.program_id(0)
    handles = []
    for j in range(n):
        t = pe * n + j
        x = tl.wait(tl.load_async(x_ptr + t * TILE, (ROWS + 1, COLS), "f32"))
        handles.append(tl.store(out + t * TILE, x))  # @x8.S  9 rows: one into the next tile
    for h in handles:
        tl.wait(h)


def _tiles_scenario(kernel, n, halo):
    mem = Memory(size_bytes=1 << 16)
    rows = 2 * n * ROWS + 1
    xs = np.arange(rows * COLS, dtype=np.float32).reshape(rows, COLS)
    x_ptr, out = mem.put(xs), mem.alloc(rows * ROW)
    want = xs.copy()
    if not halo:
        want[-1] = 0.0  # only the copy with a halo row writes the last row
    return _mesh(kernel, (x_ptr, out, n), mem, lambda m: _expect(m, out, want))


def hazard_xpe_waw_halo_loop(n=2):
    return _tiles_scenario(k_halo_tiles, n, halo=True)


def k_ring_unwaited(tl, x_ptr, buf, out):
    pe, n_pes = tl.program_id(0), tl.num_programs(0)
    x = tl.wait(tl.load_async(x_ptr + pe * TILE, (ROWS, COLS), "f32"))
    h = tl.store(buf + pe * TILE, x * 2.0)  # @x9.S
    tl.send("right", _token(tl))
    tl.wait(tl.recv_async("left", TOKEN, "f32"))
    left = (pe - 1) % n_pes
    y = tl.wait(tl.load_async(buf + left * TILE, (ROWS, COLS), "f32"))  # @x9.L
    tl.wait(tl.store(out + pe * TILE, y))
    tl.wait(h)


def _ring(kernel, n_pes):
    mem = Memory(size_bytes=1 << 16)
    xs = np.arange(n_pes * ROWS * COLS, dtype=np.float32).reshape(n_pes, ROWS, COLS)
    x_ptr, buf, out = (
        mem.put(xs.reshape(-1, COLS)),
        mem.alloc(n_pes * TILE),
        mem.alloc(n_pes * TILE),
    )
    want = (np.roll(xs, 1, axis=0) * 2.0).reshape(-1, COLS)
    return _mesh(kernel, (x_ptr, buf, out), mem, lambda m: _expect(m, out, want), n_pes=n_pes)


def hazard_xpe_raw_ring(n_pes=4):
    return _ring(k_ring_unwaited, n_pes)


def k_relay_early(tl, buf, out):
    pe = tl.program_id(0)
    if pe == 0:
        tl.wait(tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32")))  # @x10.S
        tl.wait(tl.send("right", _token(tl)))
    elif pe == 1:
        r = tl.recv_async("left", TOKEN, "f32")
        tl.wait(tl.send("right", _token(tl)))  # relayed before its own receive is waited
        tl.wait(r)
    else:
        tl.wait(tl.recv_async("left", TOKEN, "f32"))
        y = tl.wait(tl.load_async(buf, (ROWS, COLS), "f32"))  # @x10.L
        tl.wait(tl.store(out, y * 3.0))


def _relay(kernel):
    mem = Memory(size_bytes=1 << 16)
    buf, out, check = _two_tiles_out(mem)
    return _mesh(kernel, (buf, out), mem, check, n_pes=3)


def hazard_xpe_raw_relay_before_recv_wait():
    return _relay(k_relay_early)


def k_credit_loop(tl, x_ptr, slot, out, n, wait_before_credit):
    """PE 0 refills one slot tile per iteration; PE 1 reads it and hands back a credit."""
    if tl.program_id(0) == 0:
        for j in range(n):
            x = tl.wait(tl.load_async(x_ptr + j * TILE, (ROWS, COLS), "f32"))
            if j > 0:
                tl.wait(
                    tl.recv_async("right", TOKEN, "f32")
                )  # the credit: PE 1 is done with the slot
            tl.wait(tl.store(slot, x * 2.0))  # @x11.S
            tl.wait(tl.send("right", _token(tl)))
    else:
        for j in range(n):
            tl.wait(tl.recv_async("left", TOKEN, "f32"))
            f = tl.load_async(slot, (ROWS, COLS), "f32")  # @x11.L
            y = tl.wait(f) if wait_before_credit else None
            if j + 1 < n:
                tl.send("left", _token(tl))
            if y is None:
                y = tl.wait(f)  # the credit went back before this load was waited
            tl.wait(tl.store(out + j * TILE, y))


def _credit(wait_before_credit, n):
    mem = Memory(size_bytes=1 << 16)
    xs = np.arange(n * ROWS * COLS, dtype=np.float32).reshape(n * ROWS, COLS)
    x_ptr, slot, out = mem.put(xs), mem.alloc(TILE), mem.alloc(n * TILE)
    args = (x_ptr, slot, out, n, wait_before_credit)
    return _mesh(k_credit_loop, args, mem, lambda m: _expect(m, out, xs * 2.0))


def hazard_xpe_war_credit_loop(n=3):
    return _credit(False, n)


# ================================ race-free twins ==========================================


def k_fenced(tl, buf, out):
    if tl.program_id(0) == 0:
        h = tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32"))
        tl.wait(h)
        tl.wait(tl.send("right", _token(tl)))
    else:
        tl.wait(tl.recv_async("left", TOKEN, "f32"))
        y = tl.wait(tl.load_async(buf, (ROWS, COLS), "f32"))
        tl.wait(tl.store(out, y * 3.0))


def clean_xpe_raw_fenced():
    mem = Memory(size_bytes=1 << 16)
    buf, out, check = _two_tiles_out(mem)
    return _mesh(k_fenced, (buf, out), mem, check)


def k_recv_posted_early(tl, x_ptr, buf, out):
    if tl.program_id(0) == 0:
        tl.wait(tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32")))
        tl.wait(tl.send("right", _token(tl)))
    else:
        r = tl.recv_async("left", TOKEN, "f32")
        fx = tl.load_async(x_ptr, (ROWS, COLS), "f32")  # its own input, in flight with the receive
        tl.wait(r)
        y = tl.wait(tl.load_async(buf, (ROWS, COLS), "f32"))
        tl.wait(tl.store(out, y * 2.0 + tl.wait(fx)))


def clean_xpe_raw_recv_posted_early():
    mem = Memory(size_bytes=1 << 16)
    x_ptr = mem.put(np.full((ROWS, COLS), 2.0, np.float32))
    buf, out, check = _two_tiles_out(mem)
    return _mesh(k_recv_posted_early, (x_ptr, buf, out), mem, check)


def k_compute_then_fence(tl, buf, out):
    if tl.program_id(0) == 0:
        h = tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32"))
        _busy(tl)
        tl.wait(h)  # waited late, but before the send
        tl.wait(tl.send("right", _token(tl)))
    else:
        tl.wait(tl.recv_async("left", TOKEN, "f32"))
        y = tl.wait(tl.load_async(buf, (ROWS, COLS), "f32"))
        tl.wait(tl.store(out, y * 3.0))


def clean_xpe_raw_compute_then_fence():
    mem = Memory(size_bytes=1 << 16)
    buf, out, check = _two_tiles_out(mem)
    return _mesh(k_compute_then_fence, (buf, out), mem, check)


def _publish_fenced(tl, ptr, x):
    tl.wait(tl.store(ptr, x))
    tl.send("right", _token(tl))


def k_pipeline_fenced(tl, x_ptr, buf, out, n):
    if tl.program_id(0) == 0:
        for j in range(n):
            x = tl.wait(tl.load_async(x_ptr + j * TILE, (ROWS, COLS), "f32"))
            _publish_fenced(tl, buf + j * TILE, x * 2.0)
    else:
        for j in range(n):
            tl.wait(tl.store(out + j * TILE, _consume(tl, buf + j * TILE) + 1.0))


def clean_xpe_raw_pipeline_loop(n=3):
    return _pipeline(k_pipeline_fenced, n)


def k_war_fenced(tl, buf, out):
    if tl.program_id(0) == 1:
        y = tl.wait(tl.load_async(buf, (ROWS, COLS), "f32"))
        tl.wait(tl.send("left", _token(tl)))
        tl.wait(tl.store(out, y * 2.0))
    else:
        tl.wait(tl.recv_async("right", TOKEN, "f32"))
        tl.wait(tl.store(buf, tl.full((ROWS, COLS), 7.0, "f32")))


def clean_xpe_war_fenced():
    return _war_scenario(k_war_fenced)


def k_waw_fenced(tl, buf):
    if tl.program_id(0) == 0:
        tl.wait(tl.store(buf, tl.full((16 * ROWS, COLS), 1.0, "f32")))
        tl.wait(tl.send("right", _token(tl)))
    else:
        tl.wait(tl.recv_async("left", TOKEN, "f32"))
        tl.wait(tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32")))


def clean_xpe_waw_fenced():
    return _waw_scenario(k_waw_fenced)


def k_adjacent_tiles(tl, x_ptr, out, n):
    pe = tl.program_id(0)
    handles = []
    for j in range(n):
        t = pe * n + j
        x = tl.wait(tl.load_async(x_ptr + t * TILE, (ROWS, COLS), "f32"))
        handles.append(
            tl.store(out + t * TILE, x)
        )  # exactly adjacent to the next tile, on either PE
    for h in handles:
        tl.wait(h)


def clean_xpe_adjacent_tiles_loop(n=2):
    return _tiles_scenario(k_adjacent_tiles, n, halo=False)


def k_ring_fenced(tl, x_ptr, buf, out):
    pe, n_pes = tl.program_id(0), tl.num_programs(0)
    x = tl.wait(tl.load_async(x_ptr + pe * TILE, (ROWS, COLS), "f32"))
    tl.wait(tl.store(buf + pe * TILE, x * 2.0))
    tl.send("right", _token(tl))
    tl.wait(tl.recv_async("left", TOKEN, "f32"))
    left = (pe - 1) % n_pes
    y = tl.wait(tl.load_async(buf + left * TILE, (ROWS, COLS), "f32"))
    tl.wait(tl.store(out + pe * TILE, y))


def clean_xpe_ring(n_pes=4):
    return _ring(k_ring_fenced, n_pes)


def k_relay_fenced(tl, buf, out):
    pe = tl.program_id(0)
    if pe == 0:
        tl.wait(tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32")))
        tl.wait(tl.send("right", _token(tl)))
    elif pe == 1:
        tl.wait(tl.recv_async("left", TOKEN, "f32"))
        tl.wait(
            tl.send("right", _token(tl))
        )  # relayed after its receive: the order carries through
    else:
        tl.wait(tl.recv_async("left", TOKEN, "f32"))
        y = tl.wait(tl.load_async(buf, (ROWS, COLS), "f32"))
        tl.wait(tl.store(out, y * 3.0))


def clean_xpe_relay():
    return _relay(k_relay_fenced)


def k_own_halves(tl, buf, out):
    pe = tl.program_id(0)
    h = tl.store(buf + pe * TILE, tl.full((ROWS, COLS), 2.0 + pe, "f32"))  # halves exactly adjacent
    tl.wait(h)
    y = tl.wait(tl.load_async(buf + pe * TILE, (ROWS, COLS), "f32"))
    tl.wait(tl.store(out + pe * TILE, y * 3.0))


def clean_xpe_own_halves_unsignalled():
    mem = Memory(size_bytes=1 << 16)
    buf, out = mem.alloc(2 * TILE), mem.alloc(2 * TILE)
    want = np.concatenate([np.full((ROWS, COLS), 6.0), np.full((ROWS, COLS), 9.0)])
    return _mesh(k_own_halves, (buf, out), mem, lambda m: _expect(m, out, want))


def clean_xpe_war_credit_loop(n=3):
    return _credit(True, n)
