"""vtui: launch, watch and tune several vLLM instances from one keyboard-driven terminal app."""

__version__ = "0.1.0"
