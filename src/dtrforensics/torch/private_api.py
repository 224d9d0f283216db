"""The private PyTorch API the package calls, declared once.

pyproject's `[torch]` extra accepts `torch>=2.1`; these names are not
PyTorch's public API and may be missing from a torch that the floor admits.
`tests/test_torch_floor.py` checks that the installed torch satisfies the
declared floor, that every name below exists in it, and that the package
calls no private torch name missing from this list. Code that needs one where
it may be missing calls `require` first: one line naming what is missing,
instead of an AttributeError in the middle of a step.
"""

from __future__ import annotations

import importlib

from .recorder import RecordError

# Each as a dotted path from `torch` (an attribute of an instance, through an
# object that has it: an aten overload for `_schema`).
PRIVATE_TORCH_API = (
    # storages: identity and the rebuild's pointer swap (storages.py)
    "torch.UntypedStorage._cdata",
    "torch.UntypedStorage._swap_data_ptr_",
    # aten op schemas (aten.py, recorder.py)
    "torch.ops.aten.add.Tensor._schema",
    # dispatch modes and trees
    "torch.utils._python_dispatch.TorchDispatchMode",
    "torch.utils._python_dispatch._disable_current_modes",
    "torch.utils._pytree.tree_flatten",
    "torch.utils._pytree.tree_map",
    "torch.utils._pytree.tree_map_only",
    # fake tensors (spec.py, step.py, concrete.py, recorder.py)
    "torch._subclasses.fake_tensor.FakeTensor",
    "torch._subclasses.fake_tensor.FakeTensorMode",
    "torch._subclasses.fake_tensor.DataDependentOutputException",
    "torch._subclasses.fake_tensor.DynamicOutputShapeException",
    # autograd nodes: where an op ran (where.py, step.py)
    "torch._C._current_autograd_node",
    "torch._C._autograd._get_sequence_nr",
    "torch.autograd.graph.Node._sequence_nr",
    # kernel workspaces on CPU (workspace.py)
    "torch._C._profiler._RecordFunctionFast",
    # torch.compile (step.py, compiled_step.py, backend.py, joint.py, lowering.py)
    "torch._ops.OpOverload",
    "torch._guards.detect_fake_mode",
    "torch.utils._pytree.tree_leaves",
    "torch._dynamo",
    "torch._dynamo.reset",
    "torch._dynamo.backends.common.aot_autograd",
    "torch._dynamo.backends.debugging.boxed_nop",
    "torch._functorch.config",
    "torch._functorch.config.activation_memory_budget",
    "torch._functorch.config.activation_memory_budget_solver",
    "torch._inductor.compile_fx.select_decomp_table",
    "torch._inductor.compile_fx.compile_fx_inner",
    "torch._inductor.config",
    "torch._inductor.config.fallback_random",
    "torch._dynamo.utils.counters",
    # a graph dynamo hands a backend carries why it ends there (backend.py), as
    # `gm.compile_subgraph_reason`, an instance attribute: declared through its type
    "torch._dynamo.output_graph.GraphCompileReason",
    "torch._dynamo.output_graph.GraphCompileReason.graph_break",
    "torch._dynamo.config.ignore_logging_functions",
    "torch._dynamo.config.patch",
    # a checkpointed block's recomputation as a module call (checkpointing.py)
    "torch.nn.modules.module._global_forward_hooks",
    "torch.nn.modules.module._global_forward_pre_hooks",
    "torch._functorch._aot_autograd.descriptors.SavedForBackwardsAOTOutput",
    "torch._functorch._aot_autograd.utils.make_boxed_func",
    "torch._functorch.partitioners._has_tag_is_forward",
    "torch._functorch.partitioners._is_primal",
    "torch._functorch.partitioners._is_tangent",
)

_FOUND: dict[str, bool] = {}


def resolve(path: str) -> object:
    """The object a dotted path names: the longest importable module, then attributes
    (AttributeError or ImportError when missing)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            if cut == 1:
                raise
            continue
        for part in parts[cut:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(path)


def exists(path: str) -> bool:
    found = _FOUND.get(path)
    if found is None:
        try:
            resolve(path)
            found = True
        except (ImportError, AttributeError):
            found = False
        _FOUND[path] = found
    return found


def require(path: str, what: str) -> None:
    """`what` needs private torch API `path` (one of `PRIVATE_TORCH_API`): a
    `RecordError` naming it where the installed torch lacks it."""
    if path not in PRIVATE_TORCH_API:
        raise ValueError(f"{path} is not declared in PRIVATE_TORCH_API")
    if not exists(path):
        import torch
        raise RecordError(f"{what} needs {path}, which the installed torch {torch.__version__} "
                          "does not have: install a newer torch")
