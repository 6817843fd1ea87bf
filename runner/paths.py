"""Where the project's own files are, for a source checkout or an editable install."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
