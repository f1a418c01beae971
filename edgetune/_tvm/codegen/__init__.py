"""Code generation after scheduling: the TIR pipeline with table lookups as vector code
(:mod:`.lookups`), rounded float→int conversions (:mod:`.rounding`) and small
scratch buffers on the stack (:mod:`.scratch`)."""
