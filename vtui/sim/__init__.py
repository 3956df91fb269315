"""vtui's simulated vLLM engine (`vtui sim MODEL …`, `python -m vtui.sim MODEL …`): vLLM 0.32's command line,
startup log, failures, OpenAI endpoints and /metrics, with a V1-like scheduler and a GPU cost model, so vtui
runs, demos and tests without a GPU. Imports only the standard library."""
