"""Building candidates: the build cache, the fast ``load_inline`` path, the precompiled bindings
header and the light CUDA header. The parent side computes keys here without importing torch; the
compile worker builds here."""
