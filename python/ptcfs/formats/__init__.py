"""File formats and importers: safetensors (its header and tensors), PyTorch's zip checkpoints and
their pickles (read without unpickling arbitrary code), and Megatron-LM checkpoints
(ptcfs.formats.megatron). The old names (ptcfs.safetensors, ptcfs.torch_zip, ptcfs.torch_pickle,
ptcfs.megatron, ptcfs.megatron_ckpt, ptcfs.megatron_shapes) import these same modules."""
