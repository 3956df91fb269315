"""`vtui export`: a layout's instances as what runs them on other engines (vllm serve --config files,
docker compose, systemd units, Kubernetes manifests, production-stack Helm values). Imports core and
layouts, never Textual."""

from vtui.export.common import ExportError, ExportFile, ExportResult
from vtui.export.formats import FORMATS, export_layout

__all__ = ["FORMATS", "ExportError", "ExportFile", "ExportResult", "export_layout"]
