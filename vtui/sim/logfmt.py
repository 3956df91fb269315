"""vLLM's log line shapes: `(APIServer pid=N) INFO MM-DD HH:MM:SS [file.py:line] message`, uvicorn's
`INFO:     …` lines, and the tracebacks vLLM prints when a start fails.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class VllmLog:
    def __init__(
        self, api_pid: int, engine_pid: int, out: TextIO | None = None, err: TextIO | None = None
    ) -> None:
        self.api_pid = api_pid
        self.engine_pid = engine_pid
        self.out = out or sys.stdout
        self.err = err or sys.stderr

    def line(self, proc: str, level: str, where: str, message: str, stream: TextIO | None = None) -> None:
        pid = self.api_pid if proc == "APIServer" else self.engine_pid
        stamp = time.strftime("%m-%d %H:%M:%S")
        text = "".join(
            f"({proc} pid={pid}) {level} {stamp} [{where}] {part}\n" for part in message.split("\n")
        )
        target = stream or self.out
        target.write(text)
        target.flush()

    def api(self, where: str, message: str, level: str = "INFO") -> None:
        self.line("APIServer", level, where, message)

    def engine(self, where: str, message: str, level: str = "INFO") -> None:
        self.line("EngineCore", level, where, message)

    def raw(self, text: str, stream: TextIO | None = None) -> None:
        target = stream or self.out
        target.write(text if text.endswith("\n") else text + "\n")
        target.flush()

    def banner(self, model: str, version: str) -> None:
        art = [
            "",
            "       █     █     █▄   ▄█",
            f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {version}",
            f"  █▄█▀ █     █     █     █  model   {model}",
            "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀",
            "",
        ]
        for row in art:
            self.api("api_utils.py:347", row)


API_TRACE_HEAD = """Traceback (most recent call last):
  File "<venv>/bin/vllm", line 8, in <module>
    sys.exit(main())
             ^^^^^^
  File "<venv>/lib/python3.11/site-packages/vllm/entrypoints/cli/main.py", line 120, in main
    args.dispatch_function(args)
  File "<venv>/lib/python3.11/site-packages/vllm/entrypoints/cli/serve.py", line 156, in cmd
    uvloop.run(run_server(args))"""

PORT_TRACE = (
    API_TRACE_HEAD
    + """
  File "<venv>/lib/python3.11/site-packages/vllm/entrypoints/launchers/api_server/entry.py", line 176, in run_server
    listen_address, sock = setup_server(args, reuse_port=False)
                           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "<venv>/lib/python3.11/site-packages/vllm/entrypoints/launchers/launcher.py", line 348, in create_server_socket
    sock.bind(addr)
OSError: [Errno 98] Address already in use"""
)

MODEL_CONFIG_TRACE = (
    API_TRACE_HEAD
    + """
  File "<venv>/lib/python3.11/site-packages/vllm/engine/arg_utils.py", line 1955, in create_model_config
    return ModelConfig(
           ^^^^^^^^^^^^
pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig
  Value error, {message} [type=value_error, input_value=ArgsKwargs((), {{'model': ...nderer_num_workers': 1}}), input_type=ArgsKwargs]
    For further information visit https://errors.pydantic.dev/2.14/v/value_error"""
)

HF_TRACE = (
    API_TRACE_HEAD
    + """
  File "<venv>/lib/python3.11/site-packages/vllm/transformers_utils/repo_utils.py", line 301, in get_model_path
    return hf_api().snapshot_download(
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^
huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': '{model}'. Use `repo_type` argument if needed."""
)

ENGINE_TRACE = """EngineCore failed to start.
Traceback (most recent call last):
  File "<venv>/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 1482, in run_engine_core
    engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)
                  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "<venv>/lib/python3.11/site-packages/vllm/v1/engine/core.py", line {line}, in {func}
    {call}
{error}"""

ENGINE_FAILED_TRACE = (
    API_TRACE_HEAD
    + """
  File "<venv>/lib/python3.11/site-packages/vllm/v1/engine/utils.py", line 1431, in wait_for_engine_startup
    raise RuntimeError(
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"""
)
