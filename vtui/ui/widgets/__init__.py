"""Widgets that render the UI store's views: instance cards, the GPU panel, history plots."""
