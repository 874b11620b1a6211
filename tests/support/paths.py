"""The repository root, for tests and their support modules wherever they sit under tests/."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
