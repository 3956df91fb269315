"""vtui's Textual app: the only package that imports Textual (enforced by import-linter)."""
