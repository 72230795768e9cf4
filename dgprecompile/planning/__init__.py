"""Planning: model config + SGLang profile + parallel layout -> the keys, m-buckets and kernels a job calls."""
