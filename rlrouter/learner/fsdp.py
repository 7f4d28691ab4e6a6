"""FSDP2 for the Learner: shard per decoder layer, gather full weights, save and load optimizer shards.

``fully_shard`` (torch.distributed.fsdp, "FSDP2") keeps each rank's slice of every parameter as a
``DTensor``; the fp32 slices are the master weights and AdamW's state lives beside them, sharded the
same way. ``MixedPrecisionPolicy`` all-gathers them in the compute dtype for forward/backward and
reduces gradients in fp32. One FSDP unit per decoder layer (the classes a HF model lists in
``_no_split_modules``, what FSDP1's transformer auto-wrap policy used) bounds the unsharded memory to
one layer at a time; the root unit holds the embeddings, final norm, LM head and value head.

Works on CUDA with NCCL and on CPU with gloo (the CPU proxy in tests/learner/test_fsdp.py).
"""

from __future__ import annotations

from typing import Any

import torch


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's transformer blocks: modules whose class the HF model names in ``_no_split_modules``."""
    names: set[str] = set()
    for m in model.modules():
        names |= set(getattr(m, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(f"learner.strategy=fsdp: no decoder layers found in {type(model).__name__} "
                         "(it lists no _no_split_modules)")
    return layers


def mesh_for(device: torch.device) -> Any:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, (dist.get_world_size(),))


def fully_shard_model(root: torch.nn.Module, model: torch.nn.Module, mesh: Any, compute_dtype: torch.dtype) -> None:
    """``fully_shard`` each decoder layer of ``model``, then ``root`` (which holds ``model``).

    Parameters move to the mesh's device one unit at a time, so a model that does not fit on one
    device unsharded can be loaded on CPU and sharded onto it.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(root, mesh=mesh, mp_policy=mp)


def full_state_dict(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Collective (every rank must call it): the full, unsharded state on CPU on rank 0, {} elsewhere."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_full_state_dict(module: torch.nn.Module, sd: dict[str, torch.Tensor]) -> None:
    """Every rank passes the same full state; each keeps its own slice (no communication needed)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    params = dict(module.named_parameters())
    with torch.no_grad():
        for name, value in sd.items():
            if name not in params:
                raise KeyError(f"checkpoint: parameter '{name}' not in the learner")
            p = params[name]
            if isinstance(value, DTensor):  # e.g. a critic's own initial state (load_weights): every rank gathers
                value = value.full_tensor()
            if isinstance(p, DTensor):
                local = distribute_tensor(value.to(p.device, p.dtype), p.device_mesh, p.placements,
                                          src_data_rank=None).to_local()
                p.to_local().copy_(local)
            else:
                p.copy_(value)


def local_optimizer_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """This rank's optimizer state with DTensors as their local slices (loadable with weights_only)."""
    from torch.distributed.tensor import DTensor

    sd = optimizer.state_dict()
    sd["state"] = {i: {k: v.to_local().cpu() if isinstance(v, DTensor) else v for k, v in st.items()}
                   for i, st in sd["state"].items()}
    return sd


def load_local_optimizer_state(optimizer: torch.optim.Optimizer, sd: dict[str, Any]) -> None:
    """Inverse of ``local_optimizer_state``: local slices become DTensors laid out like their parameter."""
    from torch.distributed.tensor import DTensor

    params = [p for g in optimizer.param_groups for p in g["params"]]
    state = {}
    for i, st in sd["state"].items():
        p = params[int(i)]
        state[i] = {k: DTensor.from_local(v.to(p.device), p.device_mesh, p.placements, shape=p.shape,
                                          stride=p.stride())
                    if isinstance(p, DTensor) and isinstance(v, torch.Tensor) and v.dim() > 0 else v
                    for k, v in st.items()}
    optimizer.load_state_dict({**sd, "state": state})
