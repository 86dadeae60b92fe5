"""The human-readable side of a snapshot: a self-contained report.html (inline SVG, no network)."""
