"""nvCOMP: the ctypes binding of its batched C API (:mod:`.lib`) and the batched zstd codec
that never trusts its input (:mod:`.zstd`)."""
