"""Test doubles shipped with vtui (the fake supervisor the UI tests and benchmarks drive). Never imports Textual."""
