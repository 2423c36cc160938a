"""verl 0.9.1's ``main_ppo`` on a CPU-only machine, through verl's own plug-in points (test support for
tests/integrations/test_verl.py; every verl process imports it: ``VERL_USE_EXTERNAL_MODULES=verl_cpu``).

- a ``cpu`` platform (``PlatformRegistry``, chosen by ``VERL_PLATFORM=cpu``): torch's CPU, gloo, the
  Ray ``GPU`` resource as the slots verl places its workers in (Ray is started with logical GPUs);
- an ``hf`` rollout (``RolloutReplicaRegistry`` and the in-worker adapter table of
  ``verl.workers.rollout.base``): one Ray actor per replica serves generations with transformers
  (:class:`~envace_gym.agents.hf.HFAgent`), token in and token out with log-probs, and takes the
  actor's weights after each update (verl's ``naive`` checkpoint engine);
- :func:`setup`, the Ray workers' process hook: the envace estimator's ``install``, a worker group's gloo
  process group, and with ``ENVACE_VERL_BATCH`` set, the batch each advantage computation saw and gave.

verl's FSDP engine is registered for cuda and npu only; ``VERL_ENGINE_DEVICE=cuda`` (verl's own switch)
selects it on this platform."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import types

import ray
import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

ROLLOUT = "hf"


def _zero(*_, **__) -> int:
    return 0


#: ``torch.cpu`` with the ``torch.cuda`` calls verl makes that it lacks: memory counters (0), caches
#: (nothing to free), the RNG state (torch's).
DEVICE = types.SimpleNamespace(
    **{name: getattr(torch.cpu, name) for name in dir(torch.cpu) if not name.startswith("_")},
    empty_cache=_zero,
    ipc_collect=_zero,
    reset_peak_memory_stats=_zero,
    set_per_process_memory_fraction=_zero,
    memory_allocated=_zero,
    memory_reserved=_zero,
    max_memory_allocated=_zero,
    max_memory_reserved=_zero,
    mem_get_info=lambda *_: (1 << 34, 1 << 34),
    get_rng_state=lambda *_: torch.get_rng_state(),
    set_rng_state=lambda state, *_: torch.set_rng_state(state),
    manual_seed=torch.manual_seed,
    manual_seed_all=torch.manual_seed,
    get_device_name=lambda *_: "cpu",
)


@PlatformRegistry.register(platform="cpu")
class CPUPlatform(PlatformBase):
    device_name = "cpu"
    vendor_name = "cpu"
    device_module = DEVICE

    def is_available(self) -> bool:
        return True

    def current_device(self):
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index) -> None:
        pass

    def synchronize(self, device_index=None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_capability(self, device_index: int = 0):
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        pass

    def profiler_stop(self) -> None:
        pass

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self):
        return None


def server_name(replica_rank: int) -> str:
    return f"envace_hf_server_{replica_rank}"


class HFServer:
    """A rollout replica's server: verl's token-in, token-out ``generate`` over an
    :class:`~envace_gym.agents.hf.HFAgent`, one generation at a time. A request's limit is its
    ``max_tokens``, else what vLLM's server in verl allows (the response length, within the prompt and
    response budget); ``stop`` strings end it; each token's log-prob is under softmax(logits /
    temperature). The lifecycle calls verl makes of a server (sleep, wake up, abort, caches) have
    nothing to do: the model stays in memory."""

    def __init__(self, config, model_path: str):
        from envace_gym.agents.hf import HFAgent

        self.config, self.lock = config, asyncio.Lock()
        self.agent = HFAgent(model_path, seed=config.seed)
        self.updates = 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_) -> TokenOutput:
        params, budget = dict(sampling_params), self.config.prompt_length + self.config.response_length
        limit = params.get("max_tokens") or params.get("max_new_tokens")
        limit = max(1, min(limit or self.config.response_length, budget - len(prompt_ids)))
        temperature = float(params.get("temperature", 1.0))
        sampling = {"max_new_tokens": limit, "do_sample": temperature > 0}
        if temperature > 0:
            top_k = int(params.get("top_k", -1))
            sampling.update(temperature=temperature, top_p=float(params.get("top_p", 1.0)), top_k=max(0, top_k))
        stop = (params.get("stop") or [None])[0]
        async with self.lock:
            self.agent.sampling = sampling
            (gen,) = await asyncio.to_thread(self.agent.generate_ids, [list(prompt_ids)], [stop])
        reason = "length" if len(gen.completion_ids) >= limit else "completed"
        return TokenOutput(token_ids=gen.completion_ids, log_probs=gen.logprobs, stop_reason=reason)

    async def update_weights(self, weights: dict[str, torch.Tensor]) -> int:
        async with self.lock:
            model = self.agent.model
            unknown = set(weights) - set(model.state_dict())
            if unknown:
                raise ValueError(f"weights the rollout's model has no place for: {sorted(unknown)[:5]}")
            model.load_state_dict(weights, strict=False)
            self.updates += 1
            return self.updates

    async def _nothing(self, *_, **__) -> None:
        return None

    wake_up = sleep = clear_kv_cache = release_kv_cache = resume_kv_cache = _nothing
    abort_all_requests = resume_generation = start_profile = stop_profile = _nothing


class HFReplica(RolloutReplica):
    """A rollout replica served by one :class:`HFServer` actor (named by the replica's rank, so the
    workers' :class:`HFAdapter` finds it); whatever the tensor-parallel size, it generates in one process."""

    async def launch_servers(self):
        name = server_name(self.replica_rank)
        server = (
            ray.remote(HFServer)
            .options(name=name, num_cpus=0, max_concurrency=self.max_concurrency)
            .remote(self.config, self.model_config.path)
        )
        self.servers, self._server_handle, self._server_address = [server], server, name


class HFAdapter(BaseRollout):
    """The rollout's side in a hybrid worker: each weight update (every rank gathers the full tensors,
    FSDP's collectives) goes from the replica's first rank to its server."""

    async def resume(self, tags: list[str]):
        pass

    async def release(self):
        pass

    async def update_weights(self, weights, wire_format: str = "named_tensors", **kwargs):
        full = {name: tensor.detach().to("cpu", torch.float32).clone() for name, tensor in weights}
        size = self.device_mesh.size(1) * self.device_mesh.size(2)  # a replica's ranks (tp x pp)
        rank = torch.distributed.get_rank()
        if rank % size == 0:
            await ray.get_actor(server_name(rank // size)).update_weights.remote(full)


RolloutReplicaRegistry.register(ROLLOUT, lambda: HFReplica)
rollout_base._ROLLOUT_REGISTRY[(ROLLOUT, "async")] = f"{__name__}.HFAdapter"


def setup() -> None:
    """The Ray workers' process hook: the envace estimator's hook, and with ``ENVACE_VERL_BATCH`` set,
    each advantage computation's batch (responses, rewards, mask, groups, roles, generations, advantages)
    saved there as JSON."""
    from verl.trainer.ppo import ray_trainer

    from envace_gym.integrations import verl as envace_verl

    envace_verl.install()
    if os.environ.get("WG_BACKEND") == "ray" and not torch.distributed.is_initialized():
        # a worker group's rank: verl would ask torch for "cpu:gloo,cpu:gloo" (utils/distributed.py:89), a
        # backend string torch refuses; its group made here (gloo, verl's rank and rendezvous) is kept
        rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        torch.distributed.init_process_group("gloo", rank=rank, world_size=size)
    path = os.environ.get("ENVACE_VERL_BATCH")
    if not path or getattr(ray_trainer.compute_advantage, "recorded", False):
        return
    compute = ray_trainer.compute_advantage

    def compute_advantage(data, *args, **kwargs):
        data = compute(data, *args, **kwargs)
        fields = ("token_level_rewards", "response_mask", "advantages", "responses")
        record = {k: data.batch[k].tolist() for k in fields}
        for k in ("uid", "envace_roles", "envace_generations"):
            record[k] = [_plain(v) for v in data.non_tensor_batch[k]]
        with open(path, "w") as f:
            json.dump(record, f)
        return data

    compute_advantage.recorded = compute_advantage.envace = True
    ray_trainer.compute_advantage = compute_advantage


def _plain(value):
    """A batch field's entry as JSON takes it (numpy arrays and numbers to lists and Python numbers)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value.tolist() if hasattr(value, "tolist") else value
