"""Where an attention call comes from: the path of the ``nn.Module`` whose ``forward`` is running
(``model.layers.0.self_attn``), named from the outermost module called.

Global module hooks (``register_module_forward_pre_hook`` / ``register_module_forward_hook(always_call=True)``)
keep a stack of the modules in flight: exact wherever ``nn.Module.__call__`` dispatches, whatever a forward
names its arguments, and kept balanced when a forward raises. The other way, walking the Python stack at each
attention call for frames whose ``self`` is a module, costs nothing between attention calls but guesses (a
helper method of a module looks like its forward). The hooks cost one Python call per module call, and
only while a capture is active; they never change a module's inputs or outputs (each returns None)."""

from __future__ import annotations

import threading
from typing import Any

NO_MODULE = "<no module>"


class ModuleStack:
    def __init__(self) -> None:
        self._local = threading.local()
        self._names: dict[int, tuple[Any, dict[int, str]]] = {}  # id(root) -> (root, id(module) -> path)
        self._handles: list[Any] = []

    def _stack(self) -> list[Any]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def install(self) -> None:
        from torch.nn.modules import module

        self._handles = [module.register_module_forward_pre_hook(self._enter),
                         module.register_module_forward_hook(self._leave, always_call=True)]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._names.clear()  # (it holds the models: a capture kept afterwards must not keep them alive)

    def _enter(self, module: Any, args: Any) -> None:
        stack = self._stack()
        if not stack and id(module) not in self._names:
            self._names[id(module)] = (module, {id(m): name for name, m in module.named_modules()})
        stack.append(module)

    def _leave(self, module: Any, args: Any, output: Any) -> None:
        stack = self._stack()
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is module:
                del stack[i:]
                return

    def path(self) -> str:
        stack = self._stack()
        if not stack:
            return NO_MODULE
        root, names = self._names[id(stack[0])]
        return names.get(id(stack[-1])) or type(root).__name__
