"""CPU schedules: the micro-kernel design spaces (:mod:`.microkernels`), generic rules
(:mod:`.rules`) and the choice between them (:mod:`.dispatch`)."""
