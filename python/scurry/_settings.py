"""scurry.settings: the package's resources (scanpy's sc.settings names where they exist)."""
from __future__ import annotations

from . import _scurry


class _Settings:
    """n_jobs: CPU threads (0 or -1: all cores); verbosity: 0 silences scurry's messages and progress
    bars (errors are always raised), 1 or more shows them; device: 'cpu' or 'gpu' (the steps with a
    GPU path upload X once and keep it on the device: scurry.get.anndata_to_GPU; RuntimeError where
    no GPU is usable); memory: the GPU memory mode (pool, managed, managed-pool, plain), kept for
    the GPU backend; blas_core (read only): the OpenBLAS
    kernel set in use and why.

    BLAS kernels: OpenBLAS falls back to its SSE3 ("Prescott") kernels on a CPU model it does not know;
    at import the package switches it to the CPU's AVX-512 (SkylakeX) or AVX2 (Haswell) kernels, as
    the ``scurry`` command does at start-up, so both run the same kernels and give the same bits. The
    switch is for the whole process: numpy linked to the same libopenblas (Debian's) runs the new
    kernels too, whether it was imported before scurry or after. It is skipped when
    OPENBLAS_CORETYPE is set (OpenBLAS then uses that) or SCURRY_FAST_BLAS=0. Import scurry while no
    other thread is inside a BLAS call."""

    _devices = ("cpu", "gpu")
    _memories = ("pool", "managed", "managed-pool", "plain")

    def __init__(self):
        self._verbosity = 1
        self._device = "cpu"
        self._memory = "pool"
        self._n_jobs = 0

    @property
    def n_jobs(self):
        return self._n_jobs

    @n_jobs.setter
    def n_jobs(self, n):
        n = int(n)
        _scurry.set_threads(0 if n == -1 else n)
        self._n_jobs = n

    @property
    def verbosity(self):
        return self._verbosity

    @verbosity.setter
    def verbosity(self, v):
        v = int(v)
        if v < 0:
            raise ValueError(f"settings.verbosity: {v} (0 or more)")
        _scurry.set_quiet(v == 0)
        self._verbosity = v

    @property
    def device(self):
        return self._device

    @device.setter
    def device(self, d):
        if d not in self._devices:
            raise ValueError(f"settings.device: '{d}' is not one of {self._devices}")
        if d == "gpu":
            why = _scurry.gpu_unavailable()
            if why:
                raise RuntimeError(f"settings.device='gpu': {why}")
        _scurry.set_device_gpu(d == "gpu")  # neighbors, umap, leiden on the GPU's context
        self._device = d

    @property
    def memory(self):
        return self._memory

    @memory.setter
    def memory(self, m):
        if m not in self._memories:
            raise ValueError(f"settings.memory: '{m}' is not one of {self._memories}")
        self._memory = m

    @property
    def blas_core(self):
        return _scurry.blas_core_status()

    def __repr__(self):
        return (f"scurry.settings(n_jobs={self.n_jobs}, verbosity={self.verbosity}, device='{self.device}', "
                f"memory='{self.memory}', blas_core='{self.blas_core}')")


settings = _Settings()
