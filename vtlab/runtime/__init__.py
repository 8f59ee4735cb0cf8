"""How the encoder computes on this machine: precision policy, fused CPU kernels, int8, native builds."""
