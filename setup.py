"""Build the one compiled piece: hss/_field.c, the vectorised arithmetic of the prime field 2^127 - 1.

Everything else is declared in pyproject.toml. The C file is plain C99 with unsigned __int128 (gcc, clang);
it is loaded with ctypes, so it needs no Python headers beyond what setuptools already uses.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "hss._field",
            sources=["hss/_field.c"],
            extra_compile_args=["-O3", "-std=c99"],
        )
    ]
)
