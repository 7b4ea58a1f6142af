#!/bin/bash
# The package on the GPU machine (bench/RESULTS.md section 58), part 1, on the development machine:
# the core libraries as one shared library (the device builds the extension for its own Python 3.12
# against it), bundled with scurry and the libraries they load; Debian's anndata 0.8 and natsort
# (pure Python) copied and patched for the device's numpy 2.x / pandas 3.x. Writes .gpu/ (git-ignored):
# carry it and run bench/gpu_package/run.sh there.
set -eu
cd "$(dirname "$0")/../.."
B=${BUILD:-build}
mkdir -p .gpu /tmp/gpu_package
# The core library must come from the tree the device compiles the extension from (run.sh builds it
# there from the carried sources): a stale build/ made the extension and the library disagree on the
# Options structs' layout (bench/RESULTS.md section 66; the extension now refuses to load then).
cmake --build $B
git rev-parse HEAD > .gpu/core_commit
LIBS=$(awk '/^build python\/scurry\/_scurry/{f=1} f&&/LINK_LIBRARIES/{print; exit}' $B/build.ninja | sed 's/.*LINK_LIBRARIES = //' |
       tr -s ' ' '\n' | grep -v "^libscurry_.*\.a$\|^-Wl,-rpath\|cudadevrt\|cudart_static" | tr '\n' ' ')
(cd $B && g++ -shared -o /tmp/gpu_package/libscurry_py_core.so -Wl,--whole-archive libscurry_algo.a libscurry_io.a \
   libscurry_cuda.a libscurry_core.a -Wl,--no-whole-archive $LIBS -L/usr/local/cuda/lib -fopenmp)
strip --strip-unneeded /tmp/gpu_package/libscurry_py_core.so
strip -o /tmp/gpu_package/scurry $B/scurry
# Optional, in the same bundle (shared libraries once): TESTS="test_resident_gpu ..." (gpu test binaries
# that run.sh runs alone, as bench/gpu_label/run.sh) and BASELINE=path/to/an/older/scurry (run.sh times
# `scurry bench` of both binaries alternately on the same card).
extra=""
for t in ${TESTS:-}; do strip -o /tmp/gpu_package/$t "$(find $B/tests -name "$t" -type f -executable | head -1)"; extra="$extra /tmp/gpu_package/$t"; done
if [ -n "${BASELINE:-}" ]; then strip -o /tmp/gpu_package/scurry_baseline "$BASELINE"; extra="$extra /tmp/gpu_package/scurry_baseline"; fi
XZ_OPT="-8 -T2" bash ../shared/gpu/bundle.sh .gpu/pkg.tar.xz /tmp/gpu_package/scurry /tmp/gpu_package/libscurry_py_core.so $extra
rm -rf .gpu/py && mkdir -p .gpu/py
D=/usr/lib/python3/dist-packages
cp -r $D/anndata $D/anndata-*.dist-info $D/natsort $D/natsort-*.egg-info .gpu/py/
rm -rf .gpu/py/anndata/tests
sed -i 's/np\.string_/np.bytes_/g' .gpu/py/anndata/_io/h5ad.py .gpu/py/anndata/_io/zarr.py .gpu/py/anndata/compat/__init__.py
sed -i 's/np\.NaN/np.nan/g' .gpu/py/anndata/_core/merge.py
sed -i 's/np\.in1d(/np.isin(/g' .gpu/py/anndata/_core/anndata.py
sed -i 's/^from pandas.api.types import infer_dtype, is_string_dtype, is_categorical_dtype/from pandas.api.types import infer_dtype, is_string_dtype\ndef is_categorical_dtype(x):\n    return isinstance(getattr(x, "dtype", x), pd.CategoricalDtype)/' \
  .gpu/py/anndata/_core/anndata.py
du -sh .gpu
