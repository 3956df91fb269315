"""Telemetry: /metrics scraping and parsing, startup-log facts and diagnosis, NVML GPU sampling."""
