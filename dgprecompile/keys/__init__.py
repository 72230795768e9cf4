"""Cache keys: the exact entry names each DeepGEMM generation's runtime looks up, and the fingerprint of what they depend on."""
