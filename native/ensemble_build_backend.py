"""In-tree PEP 517 build backend: setuptools.build_meta + the cffi modules.

pyproject.toml selects it with ``build-backend = "ensemble_build_backend"``
and ``backend-path = ["native"]``.  Metadata comes from setup.cfg as usual;
the only addition is that ``setuptools.setup()`` also receives the extension
modules declared in native/modules.py (see native_build.py).  With no module
declared this is exactly setuptools.build_meta and the wheel is pure Python.
Both ``pip install .`` and ``pip install -e .`` (PEP 660) go through here; in
editable mode setuptools builds the extensions in place, i.e. the .so files
land next to the sources (ensemble/_native_<name>.*.so).  Either way the build
deletes old compiled modules first and writes a build report, so that a
failed compile is shown (terminal, then a warning at import and in
``python -m ensemble --version``) and never masked by a stale .so: see
native_build.py and docs/native.md.
"""

from __future__ import annotations

from setuptools import build_meta as _build_meta

import native_build


class _EnsembleBackend(_build_meta._BuildMetaBackend):
    def run_setup(self, setup_script="setup.py"):
        # There is deliberately no setup.py: this replaces running it.
        import setuptools

        try:
            setuptools.setup(**native_build.setup_kwargs())
        except SystemExit as e:  # setup() may sys.exit(0) on success
            if e.code:
                raise


_BACKEND = _EnsembleBackend()

get_requires_for_build_wheel = _BACKEND.get_requires_for_build_wheel
get_requires_for_build_sdist = _BACKEND.get_requires_for_build_sdist
prepare_metadata_for_build_wheel = _BACKEND.prepare_metadata_for_build_wheel
build_wheel = _BACKEND.build_wheel
build_sdist = _BACKEND.build_sdist
# PEP 660 (setuptools >= 64, required in pyproject.toml)
get_requires_for_build_editable = _BACKEND.get_requires_for_build_editable
prepare_metadata_for_build_editable = _BACKEND.prepare_metadata_for_build_editable
build_editable = _BACKEND.build_editable
