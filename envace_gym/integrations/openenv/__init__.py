"""OpenEnv's wire protocol, both sides: :mod:`.server` serves any envace env (``envace-gym serve``), a
:mod:`.sessions` entry per client, in the frames of :mod:`.protocol`; :mod:`.client` plays one as a
``gymnasium.Env`` (``RemoteEnv``) and checks what it gets against :mod:`.replies`; :mod:`.access` decides
who may connect to the server and how much they may send; :mod:`.config` holds ``serve``'s settings."""
