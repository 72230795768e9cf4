"""The 64-bit hash pieces DeepGEMM's C++ JITs build their cache keys from (sgl-deep-gemm 0.1.x's digest,
keys/sgl_deep_gemm_01.py; 0.2.x DeepJIT's two-lane hash, keys/deepjit.py): one copy of each."""

from __future__ import annotations

MASK64 = (1 << 64) - 1
FNV_PRIME_64 = 0x100000001B3


def fnv1a64(data: bytes, seed: int) -> int:
    h = seed
    for byte in data:
        h = ((h ^ byte) * FNV_PRIME_64) & MASK64
    return h


def splitmix64(z: int) -> int:
    """splitmix64's finaliser, which both JITs run over each lane before printing it as 16 hex digits."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)
