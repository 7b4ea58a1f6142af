# The device's Python process: allocator, THP, threads (what the package's host phases run under).
env | grep -i "preload\|malloc\|omp_\|mkl\|openblas\|python" | head
cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag
nproc; which perf py-spy 2>&1 | head -2; python3 -c "import sys; print(sys.executable, sys.version)"
python3 - <<'PY'
import time, numpy as np, pandas as pd
maps = open('/proc/self/maps').read()
print('allocators in maps:', sorted({l.split()[-1] for l in maps.splitlines() if 'malloc' in l or 'alloc' in l.split()[-1]}))
n = 1306127
for rep in range(3):
    t = time.perf_counter(); arrs = [np.empty(n) for _ in range(8)]
    for a in arrs: a.fill(1.0)
    t1 = time.perf_counter() - t; del arrs
    t = time.perf_counter(); arrs = [np.empty(n) for _ in range(8)]
    for a in arrs: a.fill(1.0)
    t2 = time.perf_counter() - t; del arrs
    print(f"8 x 10 MB new+touch: {t1*1e3:.1f} ms, again after free: {t2*1e3:.1f} ms")
PY
export LD_LIBRARY_PATH=/tmp/bundle/lib PYTHONPATH=/tmp/pkg:$PWD/.gpu/py
OMP_DISPLAY_ENV=true python3 -c "import scurry; from scurry import _scurry; print('scurry threads', _scurry.threads())" 2>&1 | grep -i "NUM_THREADS\|DYNAMIC\|scurry threads\|WAIT\|OPENMP " | head
python3 -c "import os; print('affinity', len(os.sched_getaffinity(0)))"
