"""The views a partition's projection keeps, each a set of keys derived from the fold."""
