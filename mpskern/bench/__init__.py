"""The benchmark: timing protocol, statistics, shape presets, case runner, results schema.
Entry point: `mpskern bench` (cli/bench.py); the pieces are mpskern.bench.<module>."""
