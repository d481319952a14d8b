"""A minimal PEP 517 build backend for the pure-Python package dlock.

pip's build isolation would download setuptools, which is not always
possible; this backend needs nothing but the standard library.  It builds
the wheel (``dlock-X-py3-none-any.whl``: the files of ``src/dlock`` and
``dlock-X.dist-info/{METADATA,WHEEL,RECORD}``) and the sdist
(``dlock-X.tar.gz``), reading the name, version and metadata from
pyproject.toml.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import time
import zipfile
from typing import Any, Dict, List, Optional, Tuple

try:
    import tomllib  # Python 3.11
except ImportError:  # pragma: no cover
    tomllib = None  # type: ignore[assignment]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "dlock"


def _project() -> Dict[str, Any]:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        data = f.read()
    if tomllib is not None:
        return tomllib.loads(data.decode())["project"]
    return _mini_toml_project(data.decode())


def _mini_toml_project(text: str) -> Dict[str, Any]:
    """The [project] table's simple keys, for Pythons without tomllib."""
    import ast

    out: Dict[str, Any] = {}
    section = None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("["):
            section = s.strip("[]")
            continue
        if section == "project" and "=" in s and not s.startswith("#"):
            k, v = (x.strip() for x in s.split("=", 1))
            try:
                out[k] = ast.literal_eval(v)
            except (ValueError, SyntaxError):
                pass
    return out


def _metadata() -> str:
    p = _project()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {p['name']}",
        f"Version: {p['version']}",
        f"Summary: {p.get('description', '')}",
        f"Requires-Python: {p.get('requires-python', '>=3.9')}",
    ]
    lic = p.get("license")
    if isinstance(lic, dict) and "text" in lic:
        lines.append(f"License: {lic['text']}")
    for c in p.get("classifiers", []):
        lines.append(f"Classifier: {c}")
    for d in p.get("dependencies", []):
        lines.append(f"Requires-Dist: {d}")
    body = ""
    readme = os.path.join(ROOT, p.get("readme", "README.md"))
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


def _name_version() -> Tuple[str, str]:
    p = _project()
    return p["name"], p["version"]


def _package_files() -> List[Tuple[str, str]]:
    """(path on disk, path in the wheel) of the package's files."""
    src = os.path.join(ROOT, "src", PACKAGE)
    out = []
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(dirpath, fn)
            out.append((full, os.path.relpath(full, os.path.join(ROOT, "src")).replace(os.sep, "/")))
    return out


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _zinfo(name: str) -> zipfile.ZipInfo:
    zi = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
    zi.external_attr = 0o644 << 16
    zi.compress_type = zipfile.ZIP_DEFLATED
    return zi


# ---- PEP 517 hooks ----------------------------------------------------------


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: Optional[Dict[str, Any]] = None) -> str:
    name, version = _name_version()
    dist_info = f"{name}-{version}.dist-info"
    os.makedirs(os.path.join(metadata_directory, dist_info), exist_ok=True)
    with open(os.path.join(metadata_directory, dist_info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    with open(os.path.join(metadata_directory, dist_info, "WHEEL"), "w", encoding="utf-8") as f:
        f.write(_wheel_file())
    return dist_info


def _wheel_file() -> str:
    return "Wheel-Version: 1.0\nGenerator: dlock_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    name, version = _name_version()
    dist_info = f"{name}-{version}.dist-info"
    wheel_name = f"{name}-{version}-py3-none-any.whl"
    record: List[str] = []
    os.makedirs(wheel_directory, exist_ok=True)
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w") as zf:
        def add(arcname: str, data: bytes) -> None:
            zf.writestr(_zinfo(arcname), data)
            record.append(f"{arcname},{_digest(data)},{len(data)}")

        for full, arc in _package_files():
            with open(full, "rb") as f:
                add(arc, f.read())
        add(f"{dist_info}/METADATA", _metadata().encode("utf-8"))
        add(f"{dist_info}/WHEEL", _wheel_file().encode())
        record.append(f"{dist_info}/RECORD,,")
        zf.writestr(_zinfo(f"{dist_info}/RECORD"), ("\n".join(record) + "\n").encode())
    return wheel_name


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    name, version = _name_version()
    base = f"{name}-{version}"
    sdist_name = f"{base}.tar.gz"
    os.makedirs(sdist_directory, exist_ok=True)
    files = [(os.path.join(ROOT, p), p) for p in ("pyproject.toml", "README.md",
                                                   "build_backend/dlock_build.py")]
    files += [(full, "src/" + arc) for full, arc in _package_files()]
    with tarfile.open(os.path.join(sdist_directory, sdist_name), "w:gz", format=tarfile.PAX_FORMAT) as tf:
        def add(arcname: str, data: bytes) -> None:
            ti = tarfile.TarInfo(f"{base}/{arcname}")
            ti.size = len(data)
            ti.mode = 0o644
            ti.mtime = int(time.time())
            tf.addfile(ti, io.BytesIO(data))

        for full, arc in files:
            if os.path.exists(full):
                with open(full, "rb") as f:
                    add(arc, f.read())
        add("PKG-INFO", _metadata().encode("utf-8"))
    return sdist_name
