"""Paths and small utilities shared by tests."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = ROOT / "conf"
