"""The human-readable side of a snapshot: a self-contained report.html (inline SVG, no network)."""

from biasboard.report.html import render_report, sanitize_fragment

__all__ = ["render_report", "sanitize_fragment"]
