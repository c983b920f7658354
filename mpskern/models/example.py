"""The glue the examples/*.py scripts share: their command line, one warm-up then one timed
forward pass, and the check against the network's float64 reference (a mismatch exits
non-zero)."""
import argparse
import time

from mpskern.reference import max_error, tolerance


def parser(doc, small):
    """The example's argument parser (description: doc's first line): --batch, --backend and
    --small, `small` saying what the reduced network is."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--backend", default="cpu", help="cpu, sim, metal, mps")
    ap.add_argument("--small", action="store_true", help=small)
    return ap


def shape(net, args, **full):
    """net's shape for the command line: the reduced one (net.small) under --small, else the
    real network with `full` changed; batch from --batch either way."""
    return net.shape(**{**(net.small if args.small else full), "batch": args.batch})


def timed(forward):
    """(forward()'s result, seconds of that call), after one warm-up call (thread pool,
    pipelines)."""
    forward()
    t0 = time.perf_counter()
    y = forward()
    return y, time.perf_counter() - t0


def check(net, inp, got):
    """Print got's largest error against net's float64 reference on `inp` (net.inputs()'s
    dict: "params", the inputs by name, "p"); SystemExit past the float32 tolerance."""
    err, tol = max_error(got, net.reference(inp)), tolerance("float32", net.reduction(inp))
    print(f"max error vs the float64 reference (torch.nn.functional where torch is installed): "
          f"{err:.2e} (tolerance {tol:.1e})")
    if not err <= tol:
        raise SystemExit("MISMATCH: mpskern's result differs from the reference")
