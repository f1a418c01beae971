"""Reaching boards: inventory, SSH transport, runtime setup, RPC servers, deploy and bench."""
