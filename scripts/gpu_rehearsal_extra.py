"""Two questions gpu_rehearsal.sh asks of the image's list (argv[2]):

python gpu_rehearsal_extra.py extra IMAGE        installed distributions the list does not name
python gpu_rehearsal_extra.py declared IMAGE     the project's dependencies (pyproject.toml) the list names
                                                 without a recorded version (installed at pip's choice)
"""

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def image(path: str) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    with open(path) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                name, _, version = line.strip().partition("==")
                out[norm(name)] = version or None
    return out


verb, listed = sys.argv[1], image(sys.argv[2])
if verb == "extra":
    print(
        " ".join(sorted({norm(d.metadata["Name"]) for d in metadata.distributions()} - set(listed) - {"pip"}))
    )
else:
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    names = {norm(re.split(r"[\s=<>!~;\[]", d, maxsplit=1)[0]) for d in pyproject["project"]["dependencies"]}
    print(" ".join(sorted(n for n in names if n in listed and listed[n] is None)))
