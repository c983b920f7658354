"""The staged input halo of conv2d's 2-D tiles (metal/conv2d.metal MK_CONV_HALO 1): how it is
staged (stage_mode), its layout in threadgroup memory (halo_layout, buffer 5 of the
implicit-GEMM kernels: pitches searched against bank conflicts under a 32 x 4-byte bank model)
and what one input channel of it takes (halo_plane, which gpu/conv2d.py uses_halo weighs).

Staging modes (the layout's VEC; every mode loads aligned 4-wide chunks of x's rows):
  1  stride 1, W % 4 == 0: chunks stored 4-wide in place (every row at one 4-alignment, al)
  2  stride 1, W % 4 != 0: each 4-wide store realigned from the lane's chunk and the next
     lane's (simd_shuffle_down)
  3  stride 2, W % 4 == 0: each chunk, in place, split to the two column phases (even and
     odd columns, H2 apart) as two 2-wide stores
  4  stride 2, W % 4 != 0: realigned as 2, then split as 3
  0  otherwise (stride 3 and more; a row of more than 32 chunks): element by element
     (stride 2: the two column phases)
Modes 1-4 stage whole rows per SIMD-group (32 // NV rows, the other lanes idle) where a row
takes at most 32 chunks (2-4 always): a row's next chunk is in the next lane, and the rows'
pitches can spread one SIMD-group's stores over every bank (rows of 5 or 6 chunks, and a
stride-2 chunk's two 2-wide stores, had no conflict-free pitches otherwise).
"""
import functools

import numpy as np

from mpskern.tuning import tiles
from mpskern.tuning.lookup import dtype_name

# mk_conv_layout: the halo's (halo_layout), the weights' and biases' pitches, split-K
LAYOUT_FIELDS = ("HLD", "PL", "H2", "ES", "CB", "HR", "NV", "SPAN", "VEC", "WLD", "BLD",
                 "SPLIT", "CHUNK")
BANKS = 32                # the bank model the layout is chosen for: 32 x 4 bytes
SIMD = 32                 # lanes of a SIMD-group (MK_SIMD_WIDTH): modes 2 and 4 stage whole rows
# what each VEC mode does: al > 0 (its first column where x's 4-alignment puts it), the two
# column phases
IN_PLACE, PHASES = (1, 3), (3, 4)


def _worst(words):
    """Under the bank model, the largest (cycles the most-loaded bank needs / the minimum)
    over SIMD-group accesses, one a row of `words` (4-byte words; repeats are one access)."""
    w = np.sort(words, axis=1)
    new = np.ones(w.shape, bool)
    new[:, 1:] = w[:, 1:] != w[:, :-1]
    per_bank = ((w % BANKS)[:, :, None] == np.arange(BANKS)) & new[:, :, None]
    least = -(-new.sum(axis=1) // BANKS)
    return max(1.0, float((per_bank.sum(axis=1).max(axis=1) / least).max()))


def _col(u, h2):
    """The place of halo column u in its row (stride 2 with H2: the two column phases)."""
    return (u & 1) * h2 + (u >> 1) if h2 else u


def _fragment_taps(R, S, dh, dw):
    """(channel, halo row, tap column) of mk_conv_halo_step's fragment reads, each (reads,
    8): 8 consecutive im2col rows from any start (two channels' worth of starts)."""
    kd = np.arange(2 * R * S)[:, None] + np.arange(8)
    c, rs = np.divmod(kd, R * S)
    return c, rs // S * dh, rs % S * dw


def _fragment_reads(taps, hld, pl, h2, es, word, al):
    """The words of those reads, a row per read: each of its 8 rows x 4 consecutive pixels
    (.x: pixels 0-3, .y: 4-7); `al`: the first column's place (modes 1 and 3)."""
    c, r, u = taps
    base = (c * pl + r * hld + _col(u + al, h2))[:, None, :, None]
    px = (np.arange(4)[None, :] + np.array([0, 4])[:, None])[None, :, None, :] * es
    return ((base + px) // word).reshape(-1, 32)


@functools.lru_cache(maxsize=64)
def _stage_items(hr, nv, cb, mode):
    """Per SIMD-group store instruction of mk_conv_halo_stage (a row each), its (halo row,
    channel, chunk) items, chunks fastest, then cb channels, then rows: whole rows per
    SIMD-group where a row takes at most 32 chunks (32 // nv rows, the other lanes idle),
    else 32 consecutive items. Short last groups repeat their first item (one access)."""
    per = SIMD // nv * nv if nv <= SIMD else SIMD
    items = np.arange(hr * cb * nv)
    pad = -len(items) % per
    groups = np.concatenate([items, np.zeros(pad, items.dtype)]).reshape(-1, per)
    if pad:
        groups[-1, per - pad:] = groups[-1, 0]
    row, ch = np.divmod(groups, nv)
    r, cl = np.divmod(row, cb)
    return r, cl, ch


def _stage_stores(hr, nv, hld, pl, h2, word, cb, mode):
    """The words of the staging stores, a row per instruction: modes 1 and 2 one 4-wide
    store per item at its chunk's place; modes 3 and 4 two 2-wide stores (the even columns
    at 2*chunk, the odd ones H2 further), each its own instruction."""
    r, cl, ch = _stage_items(hr, nv, cb, mode)
    base = cl * pl + r * hld
    if mode not in PHASES:
        return ((base + 4 * ch)[:, :, None] + np.arange(4)).reshape(len(r), -1) // word
    two = (base + 2 * ch)[:, :, None] + np.arange(2)
    return np.concatenate([two.reshape(len(r), -1), two.reshape(len(r), -1) + h2]) // word


def _channels(pl, cap, bk, cg):
    """Channels per slice: whole BK slices of im2col rows where that fits, else a multiple
    of 4 channels (so every slice of the weights starts 4-aligned)."""
    cb = max(1, cap // pl)
    return min(cb - cb % bk if cb >= bk else (cb & ~3 if cb >= 4 else cb), cg)


def _rows(R, S, sh, sw, dh, dw, tp, mode):
    """(halo rows, columns, chunks per row, the stride-2 phase offset's least value, the
    least row width) of the halo of a tile of tp x 8 outputs staged by `mode`: 1-4 rows of
    whole chunks (3 and 4: each phase 2 elements a chunk), 0 element by element (stride 2:
    two column phases)."""
    hr = (tp - 1) * sh + (R - 1) * dh + 1
    span = 7 * sw + (S - 1) * dw + 1
    nv = (span + 6) >> 2
    if mode in PHASES:
        return hr, span, nv, 2 * nv, 4 * nv
    if mode:
        return hr, span, nv, 0, 4 * nv
    h2 = (span + 1) // 2 if sw == 2 else 0
    return hr, span, nv, h2, 2 * h2 if h2 else span


def stage_mode(args, bn):
    """How the halo of a tile of bn/8 x 8 outputs is staged (mk_conv_layout VEC; the
    module docstring): by the stride, W's 4-alignment and the chunks a row takes."""
    a = args
    sw, aligned = a["stride_w"], a["W"] % 4 == 0
    if sw not in (1, 2):
        return 0
    if sw == 1 and aligned:
        return 1
    nv = _rows(a["R"], a["S"], 1, sw, a["dil_h"], a["dil_w"], bn // 8, 1)[2]
    if nv > SIMD:
        return 0
    if sw == 1:
        return 2
    return 3 if aligned else 4


def first_column(args, mode):
    """al: the halo's first column's place in its row, x's 4-alignment of a tile's first
    column (modes 1 and 3: the same for every tile and row, its q0 a multiple of 8)."""
    return (-args["pad_w"]) & 3 if mode in IN_PLACE else 0


@functools.lru_cache(maxsize=256)
def _layout(R, S, sh, sw, dh, dw, tp, cg, bk, elem, cap, mode, al):
    vec = mode != 0
    hr, span, nv, h2min, width = _rows(R, S, sh, sw, dh, dw, tp, mode)
    es = 1 if h2min else sw
    word = 4 // elem

    taps = _fragment_taps(R, S, dh, dw)

    def cost(hld, pl, ph):
        cb = _channels(pl, cap, bk, cg)
        # a slice of cb < cg channels whose weight columns (cb*R*S) are not 4-aligned loads
        # the next slices' weights scalar (conv2d.metal mk_conv_vec_a): avoided first
        unaligned = cb < cg and cb * R * S % 4 != 0
        reads = _worst(_fragment_reads(taps, hld, pl, ph, es, word, al))
        stores = _worst(_stage_stores(hr, nv, hld, pl, ph, word, cb, mode)) if vec else 1.0
        return (unaligned, reads, stores)

    def phases(hld):
        if mode in PHASES:          # the odd phase's 2*nv after H2, 2-aligned (2-wide stores)
            return range(h2min, hld - h2min + 1, 2)
        return range(h2min, h2min + (hld - width) // 2 + 1) if h2min else (0,)

    # the first row pitch, phase offset and channel pitch (in that order) whose weight
    # slices start 4-aligned and whose fragment reads (and VEC staging stores) are
    # conflict-free, else the one with the fewest conflicts; within `cap` (pitches in whole
    # 4-wide chunks, modes 3 and 4 in 2-wide halves: their stores are 2-wide)
    step = 2 if mode in PHASES else 4 if vec else 1
    best, ideal = None, (False, 1.0, 1.0)
    for hld in range(width, width + 9 * step, step):
        for ph in phases(hld):
            for pl in range(-(-hr * hld // step) * step, hr * hld + 64 * word, step):
                if pl > cap and best is not None:
                    break
                c = cost(hld, pl, ph)
                if best is None or c < best[0]:
                    best = (c, hld, pl, ph)
                if c == ideal:
                    break
            if best[0] == ideal:
                break
        if best[0] == ideal:
            break
    _, hld, pl, h2 = best
    if pl > cap:
        raise ValueError(f"conv2d halo: one channel's plane of {pl} elements exceeds the {cap} "
                         "staged (uses_halo should have refused this call: halo_plane)")
    return dict(HLD=hld, PL=pl, H2=h2, ES=es, CB=_channels(pl, cap, bk, cg), HR=hr, NV=nv,
                SPAN=span, VEC=mode)


def halo_layout(args, cfg, dtype="float32"):
    """The halo layout of a 2-D tile of BN/8 x 8 outputs (metal/conv2d.metal
    mk_conv_layout, buffer 5): rows, row and channel pitches, stride-2 phase offset, pixel
    step, channels per slice, chunks per row, columns, the staging mode (stage_mode). The
    pitches are searched so that the weight slices start 4-aligned and the simd kernel's
    fragment reads and the staging stores (modes 1-4) have no bank conflict (32 x 4-byte
    banks)."""
    a = args
    mode = stage_mode(a, cfg["BN"])
    return _layout(a["R"], a["S"], a["stride_h"], a["stride_w"], a["dil_h"], a["dil_w"],
                   cfg["BN"] // 8, max(1, a["C"] // a["groups"]), cfg["BK"],
                   int(np.dtype(dtype_name(dtype)).itemsize), tiles.HALO_CAP, mode,
                   first_column(a, mode))


def halo_plane(args, bn, used=False):
    """Threadgroup elements one input channel's halo takes for a 2-D tile of bn/8 x 8
    outputs: its rows x its least row width as halo_layout stages it (stage_mode 1-4:
    whole 4-wide chunks), so the layout fits tiles.HALO_CAP when this does; `used`: the rows x
    the columns the taps read (what gpu/conv2d.py AUTO_HALO_PER_TAP weighs)."""
    a = args
    hr, span, _, _, width = _rows(a["R"], a["S"], a["stride_h"], a["stride_w"], a["dil_h"],
                                  a["dil_w"], bn // 8, stage_mode(a, bn))
    return hr * (span + (span & 1 if a["stride_w"] == 2 else 0) if used else width)
