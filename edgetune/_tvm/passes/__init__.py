"""edgetune's graph passes over Relax, by kind: :mod:`.cleanups`, :mod:`.layout`, the int8 passes
(:mod:`.int8_scheme`, :mod:`.int8_layers`, :mod:`.int8_elementwise`, :mod:`.int8_kernels`),
:mod:`.fusion` and :mod:`.legalize`. :mod:`.pipeline` composes them: it is the one place their
order is written."""
