"""RMSNorm in layers: kernels (cuTile) -> config (planning) -> launch (framework-free) ->
functional (torch, autograd) -> module (nn.Module)."""
