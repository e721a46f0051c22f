"""epochq beside its peers: bench/peers/compare.py."""
