"""The cache on disk: the store (entries, index, locks), verify, and pack/unpack artifacts."""
