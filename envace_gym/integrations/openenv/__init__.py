"""OpenEnv's wire protocol, both sides: :mod:`.server` serves any envace env (``envace-gym serve``),
:mod:`.client` plays one as a ``gymnasium.Env`` (``RemoteEnv``), and :mod:`.access` decides who may
connect to the server and how much they may send."""
