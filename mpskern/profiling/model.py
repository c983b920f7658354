"""A per-family performance model, always labelled as one: it turns a dispatch's counters
(counters.py) into a lower bound and an estimate of GPU time on an Apple GPU, from the
rates in mpskern/peaks.py (CHIPS: cores, clock, memory bandwidth; FAMILIES: per-core rates,
each with its provenance). Nothing it returns is measured.

Per dispatch, with G threadgroups spread over C cores (the busiest core runs ceil(G/C) of
them), each resource's time is its work on that core at its rate:
  issue        SIMD-group instructions x their cycles (peaks.FAMILIES cycles: FMA 1,
               exp 4, rsqrt 8, integer division by a runtime value 40, 8x8x8 matrix
               multiply 18/17, ...) over 4 schedulers; lane operations become instructions
               at the kernel's measured share of active lanes. Apple9+: integer work issues
               beside floating point (max of the two), before: their sum
  threadgroup  bank-cycles (measured, conflicts included) at one per core-cycle
  L1           the lines every memory instruction touches at 64 B/cycle per core
  L2           the distinct lines each threadgroup touches at 32 B/cycle per core
  DRAM         the dispatch's footprint (distinct lines; sampled grids: scaled, at most
               each buffer's size) at the chip's memory bandwidth
issue and threadgroup time are divided by an occupancy efficiency: resident SIMD-groups
per core (limited by threads, threadgroup memory and registers per core) mapped through
metal-benchmarks' FFMA throughput at 4/8/24/88 SIMD-groups per core. The estimate is the
launch cost plus the largest of these (resources overlap); the lower bound is the launch
cost plus the larger of the kernel's FLOPs at the FMA and matrix peaks and its footprint
at the memory bandwidth, i.e. what the same work could take at best on that chip.

Expected error (docs/profiling.md): analytical GPU models like this are typically within
15-30% after calibration against measurements, worse before (nothing here is calibrated
until `mpskern selftest --calibrate` runs on a Mac); use it to catch 2x problems, not to
rank near-ties.
"""
import json
import math
import os
import warnings
from dataclasses import asdict, dataclass, field

from mpskern import peaks

REDUCE = {"simd_sum", "simd_product", "simd_max", "simd_min", "simd_and", "simd_or", "simd_xor",
          "simd_prefix_inclusive_sum", "simd_prefix_exclusive_sum", "simd_prefix_inclusive_product",
          "simd_prefix_exclusive_product", "quad_sum", "quad_max", "quad_min", "quad_product"}
DEFAULT_REGISTERS = 32      # per thread, when nothing better is known (assumed)


@dataclass
class Estimate:
    family: int
    chip: str
    lower_ms: float
    estimate_ms: float
    bound: str                          # the resource the estimate is limited by
    times_ms: dict                      # resource -> ms (launch excluded)
    simdgroups_per_core: float
    resident_groups_per_core: int
    occupancy_limit: str                # what limits resident threadgroups
    occupancy_efficiency: float
    registers: int
    registers_source: str
    calibration: float = None           # measured/modelled factor applied, when known
    label: str = "modelled"

    def as_dict(self):
        return asdict(self)


def _interp(points, x):
    if x <= points[0][0]:
        return points[0][1] * x / points[0][0]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def issue_cycles(c, fam):
    """(floating-point side, integer side, other) scheduler cycles of a dispatch."""
    cost = dict(fam.cycles)
    lanes = c.get("simd_lanes_active") or 1.0
    per_instr = 1.0 / (32.0 * lanes)           # lane operations -> SIMD-group instructions
    fp = 0.0
    for d in (c["flops"]["f32"], c["flops"]["f16"]):
        fp += d.get("add", 0) * cost["fadd"] + d.get("mul", 0) * cost["fmul"]
        fp += d.get("fma", 0) * cost["ffma"] + d.get("other", 0) * cost["fother"]
        fp += d.get("div", 0) * cost["fdiv"]
    fp += c["conversions"] * cost["conv"]
    for name, n in c["special"].items():
        fp += n * cost.get(name, cost["special"])
    intg = (c["int_ops"] * cost["iop"] + c["int_div"]["total"] * cost["idiv"] +
            c["int_div"]["by_constant"] * cost["idiv_const"])
    other = 0.0
    for t, n in c["simdgroup_matrix"]["by_type"].items():
        ta = t.split(",")[1].strip() if "," in t else t
        other += n * cost["mma_half" if ta == "half" else "mma_float"]
    for name, n in c["simd_collectives"].items():
        other += n * (cost["simd_reduce"] if name in REDUCE else cost["simd_shuffle"])
    mem = (c["device"]["load"]["instr"] + c["device"]["store"]["instr"] +
           c["threadgroup"]["load"]["instr"] + c["threadgroup"]["store"]["instr"])
    other += mem * cost["memory"]
    sg_per_group = math.ceil(c["threads_per_group"] / 32)
    other += c["barriers"] * sg_per_group * cost["barrier"]
    return fp * per_instr, intg * per_instr, other


def occupancy(c, fam, registers):
    """(resident threadgroups per core, what limits it)."""
    tpg = max(1, c["threads_per_group"])
    limits = {"threads": fam.max_threads_per_core // tpg,
              "registers": fam.register_file // (tpg * registers * 4)}
    if c["tg_memory"]:
        limits["threadgroup memory"] = fam.threadgroup_memory_per_core // c["tg_memory"]
    name = min(limits, key=lambda k: limits[k])
    return max(1, limits[name]), name


def dram_bytes(c):
    """The bytes a dispatch moves to or from DRAM: its footprint (distinct lines touched).
    When the grid was sampled, the profiled threadgroups' lines of each buffer scaled by the
    groups they stand for, at most the whole buffer (a buffer every group shares, e.g. a
    gemm operand, is then counted once)."""
    dev = c["device"]
    if dev.get("footprint_exact", True) or not c.get("groups_profiled"):
        return dev["footprint"]
    scale = c["groups"] / c["groups_profiled"]
    L = dev["line_bytes"]
    return sum(min(math.ceil(b["bytes"] / L) * L, b["lines_touched"] * L * scale)
               for b in dev["buffers"])


def estimate(c, chip, *, registers=None, registers_source=None, calibration=None):
    """The modelled Estimate of one dispatch's counters `c` on `chip` (a peaks.Chip, a
    device name or a family)."""
    if not isinstance(chip, peaks.Chip):
        chip = peaks.chip(chip)
    fam = peaks.FAMILIES[chip.family]
    regs = int(registers or DEFAULT_REGISTERS)
    src = registers_source or ("given" if registers else
                               f"assumed {DEFAULT_REGISTERS} (not known for this kernel)")
    clock = chip.ghz * 1e9
    groups = max(1, c["groups"])
    share = math.ceil(groups / chip.cores) / groups        # of the work, on the busiest core
    resident, limit = occupancy(c, fam, regs)
    per_core = min(resident, math.ceil(groups / chip.cores))
    sgs = per_core * math.ceil(c["threads_per_group"] / 32)
    eff = max(0.05, _interp(fam.occupancy, sgs))
    fp, intg, other = issue_cycles(c, fam)
    issue = (max(fp, intg) if fam.int_parallel else fp + intg) + other
    dev, tg = c["device"], c["threadgroup"]
    s = 1e3 * share
    times = {
        "issue": s * issue / (fam.schedulers * clock) / eff,
        "threadgroup": s * tg["bank_cycles"] * (fam.bank_bytes * fam.banks /
                                                fam.threadgroup_bytes_per_cycle) / clock / eff,
        "L1": s * dev["line_traffic"] / (fam.l1_bytes_per_cycle * clock),
        "L2": s * dev.get("group_line_traffic", dev["line_traffic"]) / (fam.l2_bytes_per_cycle * clock),
        "DRAM": 1e3 * dram_bytes(c) / (chip.gbps * 1e9),
    }
    bound = max(times, key=lambda k: times[k])
    launch = fam.launch_us / 1e3
    est = launch + times[bound]
    # the same work at the chip's peaks: FLOPs at the FMA rate, matrix MACs at theirs
    mma = c["simdgroup_matrix"]
    mma_ms = 0.0
    for t, n in mma["by_type"].items():
        ta = t.split(",")[1].strip() if "," in t else t
        mma_ms += n * fam.cost("mma_half" if ta == "half" else "mma_float")
    mma_ms = 1e3 * mma_ms / (fam.schedulers * chip.cores * clock)
    fma_ms = 1e3 * (c["flops"]["total"] / 2) / (128 * chip.cores * clock)
    lower = launch + max(mma_ms + fma_ms, times["DRAM"])
    if calibration:
        est *= calibration
    return Estimate(chip.family, chip.name, lower, max(est, lower), bound, times, sgs, resident,
                    limit, eff, regs, src, calibration)


def registers_of(space, config):
    """(registers per thread, how they were estimated) of one of mpskern's configurations:
    the accumulators and operands it holds per lane plus 24 for addresses and loop state (an
    estimate: the Metal compiler's allocation is not visible here)."""
    if not config:
        return None, None
    v = config.get("variant")
    if {"BM", "BN", "WM", "WN"} <= set(config):
        from mpskern.tuning import tiles
        acc = tiles.accumulators(config)
        ops = tiles.operands(config)
        return acc + ops + 24, f"estimated: {acc} accumulators + {ops} operands + 24 (config {v})"
    if "VPT" in config and v == "rows":
        return config["VPT"] + 24, f"estimated: {config['VPT']} row values + 24"
    return None, None


# ---------------------------------------------------------------- calibration
def calibration_path():
    from mpskern.peaks import cache_path
    return os.path.join(os.path.dirname(cache_path()), "calibration.json")


def load_calibration():
    """family -> {"factor": median measured/modelled, "cases": n, ...} (from `mpskern
    selftest --calibrate` on a Mac), or {}."""
    path = calibration_path()
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError:
        return {}
    except ValueError as e:            # torn or not JSON (UnicodeDecodeError included)
        data = e
    try:
        return {int(k): v for k, v in data.get("families", {}).items()}
    except (ValueError, TypeError, AttributeError):
        warnings.warn(f"{path}: not a calibration record, ignored (estimates are "
                      f"uncalibrated): run `mpskern selftest --calibrate` on a Mac again or "
                      f"delete the file", RuntimeWarning, stacklevel=2)
        return {}


def calibration_factor(family):
    """The recorded factor of `family`, or None. A damaged entry (not a record, a factor
    that is not a finite positive number) is left out with a warning naming the file: the
    estimates stay uncalibrated (and say so) rather than NaN, negative or a traceback."""
    f = load_calibration().get(int(family))
    if not f:
        return None
    v = f.get("factor") if isinstance(f, dict) else None
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
        return float(v)
    warnings.warn(f"{calibration_path()}: the apple{family} calibration is damaged (factor "
                  f"{v!r}); estimates are uncalibrated: run `mpskern selftest --calibrate` on "
                  f"a Mac again or delete the file", RuntimeWarning, stacklevel=2)
    return None


@dataclass
class Summary:
    """The model over all dispatches of one call (times add up: one command buffer)."""
    family: int
    chip: str
    lower_ms: float
    estimate_ms: float
    dispatches: list = field(default_factory=list)
    roofline_ms: float = None
    calibrated: bool = False
    label: str = "modelled"

    @property
    def roofline_pct(self):
        return 100 * self.roofline_ms / self.estimate_ms if self.roofline_ms else None

    def as_dict(self):
        d = asdict(self)
        d["roofline_pct"] = self.roofline_pct
        return d


def summarize(dispatch_counters, chip, *, registers=None, roofline=None, calibrate=True):
    """Summary of a call's dispatches on `chip`. registers: per dispatch (list) or one value.
    roofline: (flops, bytes, dtype) of the op (mpskern.structs costs) for the % of roofline."""
    if not isinstance(chip, peaks.Chip):
        chip = peaks.chip(chip)
    factor = calibration_factor(chip.family) if calibrate else None
    ests = []
    for i, c in enumerate(dispatch_counters):
        r = registers[i] if isinstance(registers, list) else registers   # else (regs, source)
        regs, src = r if isinstance(r, tuple) else (r, None)
        ests.append(estimate(c, chip, registers=regs, registers_source=src, calibration=factor))
    s = Summary(chip.family, chip.name, sum(e.lower_ms for e in ests),
                sum(e.estimate_ms for e in ests), ests, calibrated=factor is not None)
    if roofline is not None:
        flops, nbytes, dtype = roofline
        pk = peaks.TABLE.get(chip.name)
        gf = (pk.gflops(dtype) or pk.fp32_gflops) * 1e9
        s.roofline_ms = 1e3 * max(flops / gf, nbytes / (chip.gbps * 1e9))
    return s
