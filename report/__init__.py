"""The human views of a snapshot: the self-contained report.html and the terminal summary."""

from biasboard.report.html import render_report

__all__ = ["render_report"]
