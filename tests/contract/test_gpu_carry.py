"""The GPU carry against the lent image, without the image's torch (the cheap half of `make gpu-rehearsal`):
every requirement of every carried package (its real metadata, as pip finds it for CPython 3.12 on
manylinux x86_64) is met by the carry or by images/gpu-lending-image.txt; the rule that would have caught
the carry that died at import (`cannot import name 'Sentinel'`: pydantic_core's typing-extensions >= 4.16
against an image whose version nobody recorded)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from tests.support.paths import ROOT

REPO = ROOT
sys.path.insert(0, str(REPO / "scripts"))

import carry_check  # noqa: E402

ENV = carry_check.image_environment("3.12.3")


def _dist(name: str, version: str, *requires: str) -> carry_check.Dist:
    return carry_check.Dist(canonicalize_name(name), version, requires)


def test_the_shipped_carry_meets_every_requirement_on_the_image(capsys: pytest.CaptureFixture[str]) -> None:
    assert carry_check.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "carry_check: 17 carried packages against the image (Python 3.12.3): all requirements met"
    )


def test_the_image_list_holds_the_recorded_versions() -> None:
    image = carry_check.read_pins(carry_check.IMAGE)
    assert {k: image[k] for k in ("python", "torch", "torchvision", "transformers", "triton", "numpy")} == {
        "python": "3.12.3", "torch": "2.11.0", "torchvision": "0.26.0", "transformers": "5.17.0",
        "triton": "3.6.0", "numpy": "2.5.2"}  # fmt: skip
    assert image["typing-extensions"] is None and image["urllib3"] is None  # listed, version never recorded
    assert "pydantic" not in image  # transformers 5.17 declares it; the image's list does not hold it


def test_the_carry_runs_the_versions_the_project_is_tested_with() -> None:
    lock = carry_check.read_pins(REPO / "images" / "requirements.lock")
    carry = carry_check.read_pins(carry_check.CARRY)
    assert {n: (v, lock.get(n)) for n, v in carry.items() if lock.get(n) != v} == {}


def test_without_typing_extensions_the_check_names_the_packages_that_need_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    carry = tmp_path / "carry.txt"
    carry.write_text(
        "\n".join(x for x in carry_check.CARRY.read_text().splitlines() if "typing-extensions" not in x)
    )
    assert carry_check.main(["--carry", str(carry)]) == 1
    unmet = [x.strip() for x in capsys.readouterr().out.splitlines() if x.strip().startswith("unmet:")]
    why = "in the image without a recorded version: carry it"
    assert unmet == [
        f"unmet: pydantic 2.14.3 requires typing-extensions>=4.16.0: {why}",
        f"unmet: pydantic-core 2.50.4 requires typing-extensions>=4.16.0: {why}",
        f"unmet: typing-inspection 0.4.5 requires typing-extensions>=4.15.0: {why}",
    ]


def test_the_rule_case_by_case() -> None:
    image = {"numpy": "2.5.2", "six": None, "packaging": "26.4"}
    carried = [
        _dist("a", "1.0", "numpy>=2", "six", "packaging<20"),  # met, met (no version asked), the image's 26.4
        _dist("b", "1.0", "six>=1.5", "c==2.0", "missing"),  # unrecorded, the carry's 1.0, nowhere
        _dist(
            "c",
            "1.0",
            "pywin32; sys_platform == 'win32'",
            "extra-only; extra == 'fast'",
            "old; python_version < '3.9'",
        ),  # none applies on the image's CPython 3.12 / Linux  # fmt: skip
    ]
    assert carry_check.unmet(carried, image, ENV) == [
        "a 1.0 requires packaging<20: the image has 26.4",
        "b 1.0 requires six>=1.5: in the image without a recorded version: carry it",
        "b 1.0 requires c==2.0: the carry has 1.0",
        "b 1.0 requires missing: neither carried nor in the image",
    ]
    assert carry_check.shadowed([_dist("numpy", "2.4.0"), _dist("six", "1.17.0")], image) == [
        "numpy: carried 2.4.0 over the image's 2.5.2"
    ]


def test_an_installed_site_is_read_from_its_metadata_and_left_out_of_the_live_image(tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
                    "python-dateutil==2.9.0.post0", "jmespath==1.0.1"], check=True, capture_output=True)  # fmt: skip
    dists = {d.name: d for d in carry_check.from_site(site)}
    assert sorted(dists) == ["jmespath", "python-dateutil"]
    assert dists["python-dateutil"].version == "2.9.0.post0" and dists["python-dateutil"].requires == (
        "six >=1.5",
    )
    assert carry_check.unmet(dists.values(), {"six": None}, ENV) == [
        "python-dateutil 2.9.0.post0 requires six>=1.5: in the image without a recorded version: carry it"
    ]
    # --live: this interpreter's packages stand for the image; the site's (first on the path) are not the image's
    sys.path.insert(0, str(site))
    try:
        live = carry_check.live_image(site)
    finally:
        sys.path.remove(str(site))
    assert (
        live["jmespath"] == "1.1.0" and live["packaging"] == "26.3"
    )  # .venv's own (images/requirements.lock)
