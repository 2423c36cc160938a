"""Playing episodes and keeping what they did: the one episode loop (:mod:`~envace_gym.play.loop`), a run
of an agent on an env (:mod:`~envace_gym.play.run`), real against rehearsed answers call by call
(:mod:`~envace_gym.play.compare`), episodes on Ray actors (:mod:`~envace_gym.play.distributed`), and the
records they write (:mod:`~envace_gym.play.records`)."""
