#!/usr/bin/python3
"""Writes the hostile-input regression files of tests/io/test_hostile_inputs.cpp and
tests/cli/test_hostile.sh (issue 16, points 3 and 4). Each is a small valid file made with h5py
(Debian's, on libhdf5 1.10.8) and then damaged at one documented place:

  10x_vlen_heap_contiguous.h5  a Cell Ranger v3 .h5 whose matrix/barcodes (variable-length strings,
                               contiguous) name a global heap object whose size field is 2^29 + 7:
                               libhdf5 1.10.8's H5Dread crashes on it (SIGSEGV); scurry checks the
                               heap references first (InputError, exit 2).
  10x_vlen_heap_chunked.h5     the same damage with barcodes chunked and gzip-compressed: scurry
                               inflates the chunk itself and checks the references (InputError,
                               exit 2); before session 10 libhdf5 crashed on it under the guard.
  10x_vlen_heap_compact.h5     the same damage with barcodes stored compactly (in the object header),
                               a layout scurry does not read itself: libhdf5 reads it and crashes,
                               the CLI's crash guard reports it (exit 2, one line).
  10x_indptr_lies.h5           matrix/indptr's dataspace claims 4,294,967,296 int64 elements (a
                               chunked dataset never written: 12 KB of file); the reader used to
                               allocate 34 GB before any check.
  h5ad_indptr_lies.h5ad        the same for an h5ad's X/indptr.
  h5ad_attr_heap_hang.h5ad     a valid small h5ad whose global heap collections (holding the
                               variable-length string attributes, e.g. encoding-type) have their
                               free-space object's size set to 0: libhdf5 1.10.8 loops forever
                               reading any such attribute (H5HG__cache_heap_deserialize). The CLI's
                               Since session 10 the attribute's references are checked first, from
                               the object header (InputError, exit 2).
  h5ad_attr_dense_heap_hang.h5ad  the same damage in a file written with libver="latest" whose root
                               group has 12 attributes: they live in dense storage (a fractal heap),
                               where scurry does not look for them, so libhdf5 still loops forever;
                               the CLI's watchdog ends it (exit 2, one line).
  h5ad_local_heap_loop.h5ad    found by fuzz_h5ad (libFuzzer, session 16, -seed=1 -runs=1000 from
                               fuzz/corpus/fuzz_h5ad, kept as libFuzzer wrote it, not made here): the
                               root group's local heap free list loops; libhdf5 1.10.8 allocated a
                               free-list block per step until out of memory (H5HL__fl_deserialize).
                               scurry walks the list first (InputError, exit 2).
  h5ad_local_heap_huge.h5ad    made: every group's local heap states a 2^44-byte data segment and
                               no free list; refused by name (session 19).
  h5ad_btree_node_outside.h5ad found by fuzz_h5ad (libFuzzer, session 19's first device piece of
                               fuzz/longrun.sh, 16 cores; kept as libFuzzer wrote it): the root's
                               symbol table message points its B-tree past the end of the file;
                               H5Lexists sent H5B_find -> H5C_protect into a memcpy from NULL
                               (H5F__accum_read). scurry walks the group's B-tree first.
  10x_snod_outside.h5          found by fuzz_tenx_h5 in session 19's second piece, the same crash:
                               matrix's B-tree names a symbol table node past the end of the file.
  h5ad_attr_dense_heap_crash.h5ad  made: the dense-attribute file of h5ad_attr_dense_heap_hang
                               with the root's encoding-type heap object 2^29 bytes too long: scurry
                               does not look into dense attribute storage (a fractal heap), and
                               libhdf5 1.10.8 crashes reading it (H5Aread's vlen conversion); the
                               CLI's crash guard reports it (exit 2, one line). Since session 19 the
                               compact reproducer 10x_vlen_heap_compact.h5 is read by scurry itself.
  Found by session 19's local piece of fuzz/longrun.sh (2 cores, resuming from the device pieces'
  corpora; kept as libFuzzer wrote them):
  h5ad_compact_string_huge.h5ad  uns/params/name, a compact scalar vlen string, claims 1.27 GB;
                               H5Dread's vlen conversion allocated and cleared that much (an OOM).
                               scurry reads compact references from the layout message itself.
  h5ad_indptr_many_chunks.h5ad X/indptr spans 13.5M one-element chunks, none stored; H5Dread kept a
                               record per chunk (2.9 GB, 15 s: a timeout). Refused by its chunk count.
  h5ad_root_header_huge.h5ad   the root group's object header states an 8 GB first chunk; H5Fopen
                               allocated it. The root's header is walked before H5Fopen.
  h5ad_group_cycle.h5ad        the same piece, after those fixes: a group holds a hard link to an
                               ancestor; summarize_h5ad recursed until the stack overflowed. Groups
                               nested more than 64 deep are refused.
  h5ad_nested_heap_unchecked.h5ad  the same piece: detect_format's f.has("c/barcodes") looked the
                               name up through obs, whose local heap nobody had checked (H5HL_protect,
                               a memcpy of size -1). Every group on a path is checked on the way.
  Found by session 20's second device piece of fuzz/longrun.sh (16 cores; kept as libFuzzer wrote
  them; its only findings, 4 OOMs, 2 of them kept):
  h5ad_child_header_huge.h5ad  var's object header states a 40 GB first chunk, and
  h5ad_value_header_huge.h5ad  uns/params's one 275 GB: check_object_header took the header's
                               address from H5Oget_info, which loads (allocates) the header first.
                               The address now comes from the link, and the walk refuses the chunk.
  h5ad_stab_message_short.h5ad the third piece's one finding (a timeout): the root's symbol table
                               message states size 0; libhdf5 decodes its addresses anyway and
                               reaches a local heap whose free list loops. Refused by its size.
  h5ad_enum_base_malformed.h5ad  found by fuzz_h5ad (session 21's second device piece, a crash,
                               materialized from libFuzzer's artifact by SCURRY_FUZZ_MATERIALIZE):
                               the enum type of an obs column's 'ordered' attribute has a base whose
                               bit fields lie outside its bytes; H5Tget_native_type converts the
                               members' values through it and read past them (H5T__bit_find from
                               H5T__conv_i_i: SEGV on the second read in one process). Refused by
                               the base type's check first.
  h5ad_csc_rows_lie.h5ad       found by fuzz_h5ad (session 21's second device piece, a timeout,
                               materialized the same way): X is a CSC matrix whose 'shape' states
                               far more rows than obs has cells; the row reader (run --stream) made
                               a CSR of that many row pointers (8 s and 400 MB under ASan). Refused
                               against obs's length first.
  h5ad_vlen_attr_short.h5ad    found by fuzz_h5ad (libFuzzer, session 17, a 15 s -fork run of
                               fuzz/longrun.sh from fuzz/corpus/fuzz_h5ad, kept as libFuzzer wrote
                               it): the root's one-element variable-length string attribute
                               encoding-version stores 8 bytes where its reference needs 16 (length,
                               heap address, index); H5Aread overflowed the heap (H5A__read's
                               memcpy). scurry compares the stored size first (InputError, exit 2).
  h5ad_chunk_short.h5ad        found by fuzz_h5ad (libFuzzer, session 17, a 420 s piece of
                               fuzz/longrun.sh on 2 cores, kept as libFuzzer wrote it): X/indptr,
                               13 int32 in one unfiltered chunk, stores that chunk in 50 bytes of
                               52; libhdf5 1.10.8 copied the whole chunk out of the 50-byte buffer
                               (H5VM_memcpyvv from H5D__scatgath_read: a heap overflow). scurry
                               looks up each chunk's stored size first (InputError, exit 2).
  h5ad_attr_data_short.h5ad    found by fuzz_h5ad (libFuzzer, session 17, the first 520 s device
                               piece of fuzz/longrun.sh, 16 cores; kept as libFuzzer wrote it): the
                               root's attribute encoding-version states a 31-byte variable-length
                               type in a message holding 16 bytes of data; libhdf5 1.10.8's
                               attribute decoder copied 31 (a heap overflow under H5Aexists).
                               scurry checks every attribute message of an object first.
  h5ad_attr_dtype_malformed.h5ad  the same piece: a root attribute whose datatype runs past its
                               stated size (libhdf5 strdup'ed a name with no NUL inside the header).
  h5ad_enum_size.h5ad          the same piece: obs/flag's enum states a size other than its base
                               type's; scurry's buffer, sized by the base, overflowed.
  10x_compact_short.h5         found by fuzz_tenx_h5 in the same piece: matrix/shape is compact and
                               stores 1 byte for 2 int64 elements (H5D__compact_readvv copied 16).
  h5ad_dataset_dtype_malformed.h5ad  found by fuzz_h5ad in the second device piece: obs/flag's
                               datatype message runs past its size; H5Dopen2 overflowed the object
                               header's buffer and the release CLI died later in free() (exit 134).
                               scurry checks a dataset's header messages before opening it.
  h5ad_chunk_dim_zero.h5ad     found by fuzz_h5ad in the third device piece (the final binaries):
                               X/data's version-2 layout message gives a chunk dimension of 0;
                               H5Dopen2 divided by it (SIGFPE in H5D__chunk_set_info).
  10x_metadata_huge_alloc.h5   found by fuzz_tenx_h5 (libFuzzer, from the seed v2.h5): a damaged
                               object header under which libhdf5's metadata cache asks malloc for
                               ~4e18 bytes (an AddressSanitizer report inside libhdf5 under the fuzzer;
                               elsewhere malloc fails and libhdf5 returns an error). Kept as found.
  10x_bad_number_type.h5       found by fuzz_tenx_h5 (from v3.h5): matrix/data's integer type has
                               bit fields outside its 32 bits; libhdf5's H5T__conv_i_f smashes its
                               stack (glibc aborts). Kept as found.
  10x_heap_freespace_hang.h5   found by fuzz_tenx_h5 (libFuzzer, from the seed v3_vlen.h5): the same
                               damage under matrix/barcodes, a dataset: scurry's heap check refuses it.

  Found by the device pieces of session 17's long run (fuzz/longrun.sh, 16 cores, the final
  binaries of session 17), kept as libFuzzer wrote them, and avoided in session 18:
  h5ad_attr_enum_base_size.h5ad  obs/group's attribute has an enum type whose size (14) differs from
                               its base type's (2): libhdf5 decodes the values by the base's size
                               and copies them by the enum's (a heap overflow in H5T_copy_reopen
                               under H5Aget_type). The datatype walk requires the two to agree.
  h5ad_header_unreadable.h5ad  the root's object header is damaged so that H5Oget_info fails, yet its
                               vlen attribute encoding-type opens; the check of its references was
                               skipped and H5Aread overflowed the heap in H5HG_read. An object whose
                               header libhdf5 cannot describe is now refused.
  h5ad_continuation_short.h5ad the root's continuation message states a size of 0: libhdf5 decodes
                               the address and length from the bytes after it anyway and follows a
                               chunk scurry's header walk did not, where the encoding-type attribute
                               then hung it (H5C_protect, under H5HG_read). Refused.
  10x_shared_message.h5        matrix/indices' header holds a message flagged as shared, in a file
                               without a shared-message table: H5Dopen2 followed it into
                               H5SM_get_fheap_addr, which copied from NULL. Only committed datatypes
                               may be shared in such files.
  h5ad_header_chunk_huge.h5ad  found by fuzz_h5ad in session 18's device piece (10 jobs, 420 s): obs's
                               object header states a chunk of 20 GB, which libhdf5 allocates before
                               reading it (under H5Oget_info, an out-of-memory under the fuzzer).
                               Every chunk of a member's header must now lie inside the file.

  /usr/bin/python3 tests/data/fuzz_regressions/make_regressions.py
"""
import os
import h5py, numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
S = h5py.string_dtype()


def tenx(path, barcodes_kw=None, indptr_lies=False):
    n_cells, n_genes = 6, 4
    with h5py.File(path, "w") as f:
        m = f.create_group("matrix")
        m["data"] = np.array([1, 2, 3, 4, 5, 6], dtype=np.int32)
        m["indices"] = np.array([0, 1, 2, 3, 0, 1], dtype=np.int64)
        if indptr_lies:
            m.create_dataset("indptr", shape=(1 << 32,), dtype=np.int64, chunks=(1 << 16,))
        else:
            m["indptr"] = np.array([0, 1, 2, 3, 4, 5, 6], dtype=np.int64)
        m["shape"] = np.array([n_genes, n_cells], dtype=np.int32)
        m.create_dataset("barcodes", data=["AAAC-%d" % i for i in range(n_cells)], dtype=S, **(barcodes_kw or {}))
        ft = m.create_group("features")
        ft.create_dataset("id", data=np.array(["ENSG%d" % i for i in range(n_genes)], dtype="S"))
        ft.create_dataset("name", data=np.array(["G%d" % i for i in range(n_genes)], dtype="S"))
        ft.create_dataset("feature_type", data=np.array(["Gene Expression"] * n_genes, dtype="S"))


def zero_free_space(path):
    """In every global heap collection, sets the free-space object's (index 0) size to 0."""
    b = bytearray(open(path, "rb").read())
    g = b.find(b"GCOL")
    n = 0
    while g >= 0:
        size = int.from_bytes(b[g + 8:g + 16], "little")
        p = g + 16
        while p + 16 <= g + size:
            idx = int.from_bytes(b[p:p + 2], "little")
            osize = int.from_bytes(b[p + 8:p + 16], "little")
            if idx == 0:
                b[p + 8:p + 16] = bytes(8)
                n += 1
                break
            p += 16 + (osize + 7) // 8 * 8
        g = b.find(b"GCOL", g + 4)
    assert n > 0
    open(path, "wb").write(bytes(b))


def damage_heap(path):
    """Sets byte 3 of the size field of the global heap's 3rd object (a barcode) to 0x20."""
    b = bytearray(open(path, "rb").read())
    g = b.find(b"GCOL")
    assert g >= 0
    obj = g + 16 + 2 * 24  # collection header 16 bytes; objects of 16 + 8 bytes ("AAAC-n" padded)
    assert b[obj] == 3, b[obj]  # the object's index
    b[obj + 8 + 3] = 0x20
    open(path, "wb").write(bytes(b))


p = os.path.join(HERE, "10x_vlen_heap_contiguous.h5")
tenx(p); damage_heap(p)
p = os.path.join(HERE, "10x_vlen_heap_chunked.h5")
tenx(p, {"chunks": (6,), "compression": "gzip"}); damage_heap(p)
p = os.path.join(HERE, "10x_vlen_heap_compact.h5")
compact = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
compact.set_layout(h5py.h5d.COMPACT)
tenx(p, {"dcpl": compact}); damage_heap(p)
tenx(os.path.join(HERE, "10x_indptr_lies.h5"), indptr_lies=True)


def small_h5ad(path, indptr_lies, dense_attrs=False):
  with h5py.File(path, "w", **({"libver": "latest"} if dense_attrs else {})) as f:
      if dense_attrs:  # more than 8 attributes: dense storage (libhdf5's default max_compact)
          for i in range(10):
              f.attrs["extra%d" % i] = "x%d" % i
      f.attrs["encoding-type"] = "anndata"
      f.attrs["encoding-version"] = "0.1.0"
      x = f.create_group("X")
      x.attrs["encoding-type"] = "csr_matrix"
      x.attrs["encoding-version"] = "0.1.0"
      x.attrs["shape"] = np.array([3, 2], dtype=np.int64)
      x["data"] = np.array([1, 2], dtype=np.float32)
      x["indices"] = np.array([0, 1], dtype=np.int32)
      if indptr_lies:
          x.create_dataset("indptr", shape=(1 << 32,), dtype=np.int64, chunks=(1 << 16,))
      else:
          x["indptr"] = np.array([0, 1, 2, 2], dtype=np.int64)
      for g in ("obs", "var"):
          grp = f.create_group(g)
          grp.attrs["encoding-type"] = "dataframe"
          grp.attrs["encoding-version"] = "0.2.0"
          grp.attrs["_index"] = "_index"
          grp.attrs["column-order"] = np.array([], dtype=S)
          grp.create_dataset("_index", data=["a%d" % i for i in range(3 if g == "obs" else 2)], dtype=S)


small_h5ad(os.path.join(HERE, "h5ad_indptr_lies.h5ad"), True)
p = os.path.join(HERE, "h5ad_attr_heap_hang.h5ad")
small_h5ad(p, False); zero_free_space(p)
p = os.path.join(HERE, "h5ad_attr_dense_heap_hang.h5ad")
small_h5ad(p, False, dense_attrs=True); zero_free_space(p)


def huge_local_heap(path):
  """Every group's local heap ("HEAP", version 0) states a data segment of 2^44 bytes and no free
  list (offset 1, H5HL_FREE_NULL). libhdf5 refuses it itself ("actual len exceeds EOA"); scurry
  checked the segment's size only when a free list existed, and now always, naming the group
  (InputError, exit 2)."""
  b = bytearray(open(path, "rb").read())
  at = b.find(b"HEAP")
  assert at >= 0
  while at >= 0:
      b[at + 8:at + 16] = (1 << 44).to_bytes(8, "little")  # data segment size (sizeof_size 8)
      b[at + 16:at + 24] = (1).to_bytes(8, "little")       # free list head: none
      at = b.find(b"HEAP", at + 4)
  open(path, "wb").write(bytes(b))


p = os.path.join(HERE, "h5ad_local_heap_huge.h5ad")
small_h5ad(p, False); huge_local_heap(p)


def damage_root_encoding_heap(path):
  """The global heap object holding the root's encoding-type ("anndata") gets 2^29 added to its size
  (byte 3 of the size field set to 0x20), as damage_heap does to a barcode."""
  b = bytearray(open(path, "rb").read())
  g = b.find(b"GCOL")
  assert g >= 0
  o = g + 16
  while int.from_bytes(b[o:o + 2], "little") != 0:
      size = int.from_bytes(b[o + 8:o + 16], "little")
      if bytes(b[o + 16:o + 16 + size]) == b"anndata":
          b[o + 8 + 3] = 0x20
          open(path, "wb").write(bytes(b))
          return
      o += 16 + (size + 7) // 8 * 8
  raise AssertionError("no 'anndata' heap object")


p = os.path.join(HERE, "h5ad_attr_dense_heap_crash.h5ad")
small_h5ad(p, False, dense_attrs=True); damage_root_encoding_heap(p)
