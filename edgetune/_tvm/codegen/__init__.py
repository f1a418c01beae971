"""Code generation after scheduling: the TIR pipeline with table lookups as vector code
(:mod:`.lookups`), rounded float→int conversions (:mod:`.rounding`), divisions as exact
multiplies (:mod:`.division`) and 8-bit → float conversions (:mod:`.widening`) on AArch64, and
small scratch buffers on the stack (:mod:`.scratch`)."""
