"""Reports from benchmark results: HTML and Markdown with matplotlib figures, and the
comparison of two result sets. Entry point: `mpskern report` (cli/report.py)."""
