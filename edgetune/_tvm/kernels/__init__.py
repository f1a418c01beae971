"""edgetune's kernel computes (TE): :mod:`.conv` (packed direct, int8, depthwise),
:mod:`.winograd`, :mod:`.dense`, the dot-product instruction families of :mod:`.dot`, and the CPU
facts they are shaped by (:mod:`.cpu`)."""
