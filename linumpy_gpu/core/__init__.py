"""Numpy/cupy-agnostic pieces every layer shares: array layouts, chunk plans, selections,
where a batch's buffers go, and placing decoded chunks."""
