"""Code generation after scheduling: the TIR pipeline with table lookups as vector code
(:mod:`.lookups`) and rounded float→int conversions (:mod:`.rounding`)."""
